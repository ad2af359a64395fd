"""The hostile-input table's pure parts: the one line, placeholders, cells, the rows."""
import importlib.util
import os
import socket
import sys

from helpers import ROOT

_spec = importlib.util.spec_from_file_location("hostile_inputs",
                                               os.path.join(ROOT, "scripts", "hostile_inputs.py"))
hi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hi)
sys.modules["hostile_inputs"] = hi  # what the case list imports its helpers from
_cases_spec = importlib.util.spec_from_file_location(
    "hostile_cases", os.path.join(ROOT, "scripts", "hostile_cases.py"))
cases = importlib.util.module_from_spec(_cases_spec)
_cases_spec.loader.exec_module(cases)


def test_last_line_is_stderrs_last_without_the_absl_prefix():
    err = ["Traceback...", "I1201 11:27:18.662175 139886195510144 progress.py:68] done | steps 3", ""]
    assert hi.last_line(err, ["stdout"]) == "done | steps 3"
    assert hi.last_line([], ["ok data: 10 examples"]) == "ok data: 10 examples"
    assert hi.last_line([], []) == ""
    assert hi.last_line(["x" * 500], [], limit=20) == "x" * 17 + "..."


def test_placeholders_hide_temp_paths_interpreter_repo_and_pids():
    tmp = "/tmp/hostile-abc123"
    text = (f"{sys.executable} -m horovod_train --run_dir={tmp}/run ({ROOT}/horovod_train/x.py) "
            f"under {os.path.join(os.path.dirname(sys.executable), 'horovodrun')} "
            f"held by pid 4242 on {socket.gethostname()} since 2026-12-01T11:40:25")
    assert hi.placeholders(text, tmp) == ("python -m horovod_train --run_dir=<tmp>/run "
                                          "(horovod_train/x.py) under horovodrun "
                                          "held by pid <pid> on <host> "
                                          "since <time>")


def test_cells_escape_pipes_and_backticks_and_signals_are_named():
    assert hi.cell("train | step 1 `x`") == "train \\| step 1 'x'"
    assert hi.format_code(-9) == "-9 (signal 9)" and hi.format_code(2) == "2"
    assert hi.format_code("HUNG") == "HUNG"


def test_shown_command_formats_env_and_argv_with_placeholders():
    case = hi.Case("Bad flags", "x", [sys.executable, "-m", "horovod_train", "--run_dir={tmp}/r"], 2,
                   env={"HOROVOD_RANK": "abc", "TF_CONFIG": '{{"a": 1}}'})
    assert hi.shown_command(case, "/tmp/t") == ("HOROVOD_RANK=abc TF_CONFIG='{\"a\": 1}' "
                                                "python -m horovod_train --run_dir=<tmp>/r")


def test_render_groups_rows_and_marks_unmet_expectations():
    ok = hi.Result(hi.Case("Bad flags", "a", [], 2), "cmd a", 2, "one | line", None)
    bad = hi.Result(hi.Case("Checkpoints", "b", [], 0), "cmd b", "HUNG", "", "no exit within 120 s")
    text = hi.render([bad, ok], 12.0)
    assert "2 cases, 1 as expected, 1 not (12 s)." in text
    assert text.index("## Bad flags") < text.index("## Checkpoints")  # the table's group order
    assert "| a | `cmd a` | 2 | 2 | one \\| line |" in text
    assert "| b | `cmd b` | HUNG | 0 (**not met**: no exit within 120 s) |  |" in text


def test_every_case_has_a_known_group_and_a_unique_name():
    names = [c.name for c in cases.CASES]
    assert len(names) == len(set(names))
    assert {c.group for c in cases.CASES} <= set(hi.GROUPS)


def test_under_horovodrun_the_ranks_code_and_lines_count_not_horovodruns():
    case = hi.Case("Faults during a run", "x", [hi.HOROVODRUN, "-np", "2"], 2)
    err = ["[1]<stderr>:horovod_train: error: --run_dir: cannot write", "Traceback (most recent",
           "RuntimeError: Horovod detected that one or more processes exited with non-zero "
           "status ... Process name: 1", "Exit code: 2"]
    assert hi.rank_code(case, 1, err) == 2
    assert hi.program_lines(case, err) == err[:1]
    plain = hi.Case("Bad flags", "y", ["python"], 2)
    assert hi.rank_code(plain, 1, err) is None and hi.program_lines(plain, err) == err
