"""Where the chief's bar goes (find_terminal's rule, on a fake /proc and a real
pseudo-terminal) and how it keeps out of the lines' way. No TF."""
import io
import logging
import os
import select
import time

import pytest

from horovod_train.observe import progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def pty_pair():
    master, slave = os.openpty()
    yield master, os.ttyname(slave)
    os.close(slave)
    os.close(master)


def _tty_nr(path: str) -> int:
    """The kernel's encoding of a device number, as /proc/<pid>/stat's tty_nr holds it."""
    rdev = os.stat(path).st_rdev
    major, minor = os.major(rdev), os.minor(rdev)
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def _process(proc, pid: int, ppid: int, tty_nr: int, stderr: str, name="python3 -m x"):
    os.makedirs(proc / str(pid) / "fd")
    # The name in parentheses may hold spaces and ')': the fields after it count.
    (proc / str(pid) / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} {pid} {tty_nr} -1 0\n")
    os.symlink(stderr, proc / str(pid) / "fd" / "2")


def _tree(tmp_path, launcher_tty_nr: int, launcher_stderr: str):
    """rank 300 (no terminal) <- horovodrun 200 (its stderr a pipe) <- shell 100."""
    proc = tmp_path / "proc"
    _process(proc, 300, 250, 0, "pipe:[1]")
    _process(proc, 250, 200, 0, "pipe:[2]", name="sh) x (y")
    _process(proc, 200, 100, launcher_tty_nr, os.devnull)
    _process(proc, 100, 1, launcher_tty_nr, launcher_stderr)
    return str(proc)


# Never opened: a path that does not exist would be created (tests may run as root).
NO_TTY = os.path.dirname(__file__)  # a directory: open(..., "w") fails like ENXIO would


def test_stderr_first_then_the_controlling_terminal(pty_pair, tmp_path):
    stream = _Tty()
    assert progress.find_terminal(stream, tty=NO_TTY) is stream
    _, slave = pty_pair
    found = progress.find_terminal(io.StringIO(), tty=slave, proc=str(tmp_path))
    assert found.name == slave
    found.close()


def test_else_the_nearest_ancestor_whose_stderr_is_its_controlling_terminal(pty_pair, tmp_path):
    _, slave = pty_pair
    proc = _tree(tmp_path, _tty_nr(slave), slave)
    found = progress.find_terminal(io.StringIO(), tty=NO_TTY, proc=proc, pid=300)
    assert found is not None and found.name == slave
    found.close()


def test_no_terminal_when_the_ancestors_stderr_is_not_its_controlling_one(pty_pair, tmp_path):
    _, slave = pty_pair
    nobodys = _tree(tmp_path / "a", 0, slave)  # e.g. a daemon writing to /dev/console
    assert progress.find_terminal(io.StringIO(), NO_TTY, nobodys, pid=300) is None
    other = _tree(tmp_path / "b", _tty_nr(slave) + 1, slave)
    assert progress.find_terminal(io.StringIO(), NO_TTY, other, pid=300) is None


def test_auto_draws_nowhere_under_ci_and_bar_falls_back_to_the_stream():
    where = {"tty": NO_TTY, "proc": NO_TTY, "pid": 300}
    assert progress.bar_terminal("auto", _Tty(), {}) is not None
    assert progress.bar_terminal("auto", _Tty(), {"CI": "true"}) is None
    assert progress.bar_terminal("auto", io.StringIO(), {}, **where) is None
    assert progress.bar_terminal("lines", _Tty(), {}) is None
    plain = io.StringIO()
    assert progress.bar_terminal("bar", plain, {"CI": "1"}, **where) is plain


def test_on_stderr_the_bar_redraws_in_place_and_ends_with_a_newline():
    stream = _Tty()
    bar = progress.Progress("bar", 10, stream, environ={})
    bar.line("train | step 5/10", 5, samples_per_sec=100.0, step_s=0.5)
    bar.step(10)
    bar.close()
    out = stream.getvalue()
    assert out.count("\r\033[K") >= 2 and "eta 2s" in out and out.endswith("\n")
    assert "10/10 100%" in out


def _read(master: int) -> str:
    out = b""
    while select.select([master], [], [], 0.2)[0]:
        out += os.read(master, 65536)
    return out.decode()


def test_on_its_own_terminal_the_bar_clears_for_every_log_line_and_waits_after_it(pty_pair):
    master, slave = pty_pair
    bar = progress.Progress("auto", 10, io.StringIO(), environ={}, tty=slave)
    assert bar.bar and bar.terminal.name == slave
    bar.line("train | step 2/10", 2, samples_per_sec=100.0, step_s=0.5)
    bar.step(3)  # right after a line: the line may still be in the launcher's pipe
    assert _read(master) == ""
    time.sleep(progress.BAR_HOLD_S)
    bar.step(4)
    assert "[############..................]  4/10  40% | 100 samples/s | eta 3s" in _read(master)
    record = logging.LogRecord("absl", logging.INFO, __file__, 1, "eval | x", (), None)
    assert progress.logging.get_absl_handler().filter(record)
    assert _read(master) == "\r\033[K"  # any line of the process clears the bar first
    bar.close()
    # Its own filter is gone (others, such as the trainer's redaction an earlier test of
    # this process installed, are not the bar's to remove).
    assert bar.terminal.closed
    assert bar._before_log_line not in progress.logging.get_absl_handler().filters


def test_lines_mode_draws_nothing(pty_pair):
    _, slave = pty_pair
    bar = progress.Progress("lines", 10, _Tty(), environ={}, tty=slave)
    assert not bar.bar and bar.terminal is None
    bar.step(10)
    bar.close()
