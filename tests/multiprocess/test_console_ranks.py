"""The console under the launchers (issue 22, parts 1 and 3), with real ranks.

`make train` prints nothing but our lines (no TensorFlow start-up lines, no absl prefix,
no 16-digit float) and its done line's samples/s is summary.json's; the ranks of
mpirun and horovodrun print only our lines; on a terminal the chief draws its bar
there under horovodrun --gloo and --mpi, and neither through plain pipes nor under CI.
"""
import json
import os
import pty
import re
import select
import signal
import time

import pytest

from helpers import ABSL_PREFIX, LAUNCHER_TAG, ROOT, child_env, run_cli
from ranks import horovodrun, mpirun


TAG = LAUNCHER_TAG
OURS = re.compile(TAG + r"(?:gpu   |config |start-up |scaling |legend |train |straggler |divergence |eval  |done  )\| ")
# A float's fraction in full (loss 0.0009377987735206261), not any run of digits: a
# baseline key in hex (6b5231702160a25b) holds ten in a row by chance.
# TensorFlow's C++ start-up lines (oneDNN, the CUDA probe, CPU features, absl's preamble).
TF_START_UP = re.compile(r"oneDNN custom operations|cuda drivers|cpu_feature_guard|absl::InitializeLog")
LONG_NUMBER = re.compile(r"\.\d{10,}")
BAR = re.compile(r"\r\x1b\[K\[#+\.*\] +\d+/\d+ +\d+% \| (?:\d+|-) samples/s \| eta ")
SHORT = ["--max_steps=60", "--log_every=20", "--eval_every_epochs=0", "--noinstrument"]
# For the bar: steps slow enough, and lines rare enough, that it is redrawn between them.
# After each line the chief holds the bar 0.5 s (BAR_HOLD_S); digits' default batch runs
# 60 steps in well under that on a fast host, so SHORT's run may never show a moving bar;
# bound ranks ran even 60 steps of batch 128 (about 1 s) too fast for a redraw, so 300.
BAR_STEPS = 300
BAR_RUN = [f"--max_steps={BAR_STEPS}", "--epochs=100", f"--log_every={BAR_STEPS}",
           "--batch_size=128", "--eval_every_epochs=0", "--noinstrument"]


def _env(**extra) -> dict:
    """As a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (it hides nothing here)."""
    env = child_env(**extra)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.pop("CI", None) if "CI" not in extra else None
    return env


def _not_ours(lines) -> list[str]:
    return [line for line in lines if not OURS.match(line)]


def test_make_train_prints_only_our_lines(tmp_path):
    proc = run_cli(["make", "train", f"RUN_DIR={tmp_path}"], timeout=900, env=_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    err = proc.stderr.splitlines()
    assert _not_ours(err) == [], proc.stderr
    assert not [line for line in err if ABSL_PREFIX.match(line) or LONG_NUMBER.search(line)]
    out = [line for line in proc.stdout.splitlines() if not line.startswith("[setup] ")]
    assert out[0].startswith("horovodrun -np 2 -H localhost:2 python -m horovod_train")
    assert out[1].startswith("summary: 2 ranks, test accuracy ") and len(out) == 2, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    rate = f"{summary['samples_per_sec']:.0f}"
    done = [line for line in err if "done  | " in line]
    assert len(done) == 1 and f"| {rate} samples/s |" in done[0], (done, rate)
    assert f", {rate} samples/s," in out[1]
    # The time to the first step by phase: the chief's, once, as summary.json has it.
    startup_lines = [line for line in err if "start-up | " in line]
    chief = summary["startup_s_per_rank"][0]
    assert len(startup_lines) == 1 and \
        f"| {chief['total']:.1f} s to the first step: imports " in startup_lines[0], startup_lines
    assert len(summary["startup_s_per_rank"]) == 2
    assert f"summary_json={tmp_path}/summary.json" in proc.stderr  # the changed option
    assert "\x1b[K" not in proc.stderr + proc.stdout  # pipes, no terminal: no bar


def test_the_ranks_of_mpirun_print_only_our_lines():
    proc = run_cli(mpirun(2, SHORT), timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stderr.splitlines()  # mpirun tags nothing unless told to
    assert _not_ours(lines) == [] and not [line for line in lines if ABSL_PREFIX.match(line)]
    assert "done  | steps 60 |" in proc.stderr


def _in_terminal(argv, env, timeout=600) -> tuple[int, str]:
    """Runs argv with a new pseudo-terminal as its controlling terminal and its stdin,
    stdout and stderr; returns (exit code, everything the terminal showed)."""
    pid, master = pty.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.chdir(ROOT)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the terminal's last process closed it
                    break
                if not data:
                    break
                out += data
        else:
            os.killpg(pid, signal.SIGKILL)
    finally:
        os.close(master)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


@pytest.mark.parametrize("controller, tag", [("gloo", "[0]<stderr>:"), ("mpi", "[1,0]<stderr>:")])
def test_on_a_terminal_the_chief_draws_a_bar_under_horovodrun(controller, tag):
    code, shown = _in_terminal(horovodrun(2, controller, BAR_RUN), _env())
    assert code == 0, shown[-4000:]
    assert BAR.search(shown), shown[-4000:]
    # Drawn on the terminal by the chief itself, not a line through the launcher.
    assert not re.search(r"<std(?:err|out)>:[^\n]*\[#", shown), shown[-4000:]
    assert f"{tag}train | step {BAR_STEPS}/{BAR_STEPS} |" in shown  # lines still come, through the launcher
    # Each line starts a row, or the cleared bar's row: none lands inside a bar. The first
    # may start the output (horovodrun's build check no longer prints TensorFlow's lines).
    starts = [m.start() for m in re.finditer(r"\[\d+(?:,\d+)?\]<std", shown)]
    assert all(i == 0 or shown[:i].endswith(("\n", "\x1b[K")) for i in starts), shown[-4000:]


def test_under_ci_the_ranks_of_horovodrun_print_only_our_lines_and_no_bar(tmp_path):
    """On a terminal under CI: lines only, no bar. Every rank's line is ours, and
    horovodrun's own build check (its process, untagged) prints no TensorFlow line even
    when it asks afresh (a new home: build-check-once.patch mutes the check's file
    descriptors). Its answer is kept there and read back by the next launch: flipped to
    "not built", horovodrun believes it without asking again."""
    home = tmp_path / "home"
    home.mkdir()
    code, shown = _in_terminal(horovodrun(2, "gloo", SHORT), _env(CI="1", HOME=str(home)))
    assert code == 0, shown[-4000:]
    tagged = [line for line in shown.splitlines() if re.match(r"\[[\d,]+\]<std", line)]
    assert tagged and _not_ours(tagged) == [], shown[-4000:]
    assert "[0]<stderr>:train | step 60/60 |" in shown
    assert any("done  | steps 60 |" in line for line in tagged)
    assert "\x1b[K" not in shown and not BAR.search(shown)
    assert not TF_START_UP.search(shown), shown[:3000]
    answers = list((home / ".horovod" / "build-checks").iterdir())
    assert [json.loads(a.read_text()) for a in answers] == [{"result": True}], answers
    answers[0].write_text(json.dumps({"result": False}))
    again = run_cli(horovodrun(2, "gloo", SHORT), timeout=120, env=_env(HOME=str(home)))
    assert again.returncode != 0 and "Gloo support has not been built" in again.stderr, \
        again.stderr[-3000:]


def test_progress_lines_means_no_bar_on_a_terminal():
    code, shown = _in_terminal(horovodrun(2, "mpi", SHORT + ["--progress=lines"]), _env())
    assert code == 0 and "\x1b[K" not in shown, shown[-4000:]


def test_make_train_fails_with_horovodruns_code_and_its_last_lines(tmp_path):
    """The filter in the recipe neither hides horovodrun's failure nor eats its end."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = run_cli(["make", "train", f"RUN_DIR={blocked}/run"], timeout=600, env=_env())
    code = re.search(r"\] Error (\d+)", proc.stderr)
    assert proc.returncode != 0 and code and code.group(1) != "0", proc.stderr[-3000:]
    assert "summary_json" in proc.stderr and "Fix:" in proc.stderr, proc.stderr[-3000:]
    assert "oneDNN" not in proc.stderr and "absl::InitializeLog" not in proc.stderr
