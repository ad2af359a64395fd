"""Issue 55 item 4, the reviewer's gaps: a message is redacted BEFORE it is cut (a URL cut
before its '@' is no longer recognised), the log filter sits on absl's logger itself
(so it applies whatever the handlers are, Python's last-resort one included), every CLI
entry installs it, and a process's stderr lines go through one redacting function."""
import ast
import logging
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from test_redact import handlers_restored  # noqa: F401 - the fixture: filters restored

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
LONG_URL = f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/digits"


def test_a_launch_message_is_redacted_before_it_is_cut():
    """The tf-config case: the argv's repr is cut at 77 characters, inside the password."""
    from launch.errors import launch_error
    argv = ["python", "-m", "horovod_train", f"--data_dir={LONG_URL}"]
    err = launch_error("tf-config", argv, "no command", "python -m launch tf-config")
    assert "wJalr" not in str(err), str(err)
    assert "s3://***@bucket" in str(err)


def test_a_data_error_is_redacted_before_it_is_cut():
    """short_message keeps 200 characters of TF's text: a credential straddling the cut
    must not leave its first part behind."""
    from horovod_train.data.errors import short_message
    text = "x" * 160 + f" corrupted record at gs://user:{SECRET}@bucket/train-0.tfrecord"
    shown = short_message(text, "corrupted record")
    assert "wJalr" not in shown and len(shown) <= 200, shown


def test_the_filter_sits_on_absls_logger_once(handlers_restored):
    from horovod_train import console
    console.redact_logs()
    console.redact_logs()
    absl_logger = logging.getLogger("absl")
    assert sum(isinstance(f, console.RedactLogs) for f in absl_logger.filters) == 1
    record = absl_logger.makeRecord("absl", logging.WARNING, __file__, 1,
                                    "data | --skip_corrupt: %s: skipping", (LONG_URL,), None)
    assert absl_logger.filter(record)
    assert record.getMessage() == "data | --skip_corrupt: s3://***@bucket/digits: skipping"


def test_absl_lines_are_redacted_with_no_handler_set_up():
    """No app.run, no handler on the root logger: absl's warning reaches stderr through
    Python's last-resort handler, as in `horovod_train.data verify` before this fix."""
    code = ("import sys\nfrom absl import logging\nfrom horovod_train import console\n"
            "console.redact_logs()\nlogging.warning('data | %s: skipping', sys.argv[1])\n")
    proc = subprocess.run([sys.executable, "-c", code, LONG_URL], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "s3://***@bucket/digits" in proc.stderr and "wJalr" not in proc.stderr, proc.stderr


def test_every_cli_entry_installs_the_filter(monkeypatch):
    """commands.run is the front door of `horovod_train X` and `python -m horovod_train X`;
    each tool's own `python -m` block goes through commands.standalone."""
    from horovod_train import commands, console
    calls = []
    monkeypatch.setattr(console, "redact_logs", lambda: calls.append("redact"))
    assert commands.run(["--version"]) == 0
    assert calls == ["redact"]
    for module in ("horovod_train/data/__main__.py", "horovod_train/report.py",
                   "horovod_train/data/pycorpus.py"):
        tail = open(os.path.join(ROOT, module), encoding="utf-8").read().split(
            'if __name__ == "__main__":')[-1]
        assert "commands.standalone(" in tail, module


# ---- one function for what a process writes to stderr ----

# Raw stderr writes allowed in horovod_train/, each (file, function) with why it is safe.
ALLOWED_STDERR = {
    ("horovod_train/console.py", "last_line"): "the one function: redacts, one write, flush",
    ("horovod_train/stacks.py", "report"): "the stacks summary: one write through redact()",
}


def _stderr_writes(path: str):
    """(function name, line) of each `print(..., file=sys.stderr)` and
    `sys.stderr.write(...)` in the file at `path`, named by its innermost function."""
    found = []

    def visit(node, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and _writes_stderr(node):
            found.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(open(path, encoding="utf-8").read()), "<module>")
    return sorted(found, key=lambda item: item[1])


def _is_stderr(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "stderr"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _writes_stderr(call: ast.Call) -> bool:
    if isinstance(call.func, ast.Name) and call.func.id == "print":
        return any(k.arg == "file" and _is_stderr(k.value) for k in call.keywords)
    return (isinstance(call.func, ast.Attribute) and call.func.attr == "write"
            and _is_stderr(call.func.value))


def test_no_raw_stderr_write_outside_the_allowlist():
    package = os.path.join(ROOT, "horovod_train")
    raw = []
    for folder, _, names in os.walk(package):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            raw += [f"{rel}:{line} in {func}" for func, line in _stderr_writes(path)
                    if (rel, func) not in ALLOWED_STDERR]
    assert not raw, ("write these through console.last_line (it redacts) or, for fixed "
                     f"text, add them to ALLOWED_STDERR with the reason: {raw}")


def test_the_scan_sees_both_forms(tmp_path):
    """The check above can fail: both forms of a raw write are found, in their function."""
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\ndef a(p):\n    print(p, file=sys.stderr)\n"
                      "def b(p):\n    sys.stderr.write(p)\n    print(p)\n")
    assert _stderr_writes(str(sample)) == [("a", 3), ("b", 5)]


def test_last_line_redacts_in_one_write(capsys):
    from horovod_train import console
    console.last_line(f"horovod_train: error: {LONG_URL}")
    err = capsys.readouterr().err
    assert err == "horovod_train: error: s3://***@bucket/digits\n"
