"""A run dir other local users can write (issue 55, item 1), beyond the stacks files
test_stacks.py covers: the start-up warning about such a dir, stacks read through the
directory that was checked (not a path another user can re-point), and --native's
py-spy output kept only when the process is still the rank after py-spy returns.
Another user is `nobody`, for real (runuser), as in test_stacks.py."""
import json
import os
import subprocess
import sys
import time

import pytest

from horovod_train import stacks
from launch import private_files
from launch import stacks as reader
from unit.test_stacks import PROFILE, _as_nobody, shared  # noqa: F401 - a fixture


def test_no_warning_for_a_run_dir_only_we_can_write(tmp_path):
    os.chmod(tmp_path, 0o755)
    assert private_files.shared_dir_warning(str(tmp_path)) is None
    assert private_files.shared_dir_warning(str(tmp_path / "not-yet")) is None


def test_no_warning_for_a_world_writable_dir_with_the_sticky_bit(tmp_path):
    """/tmp's kind: others may add names but not rename or remove ours."""
    os.chmod(tmp_path, 0o1777)
    assert private_files.shared_dir_warning(str(tmp_path)) is None


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_run_dir_others_can_write_is_named_in_one_line(tmp_path, mode):
    os.chmod(tmp_path, mode)
    line = private_files.shared_dir_warning(str(tmp_path))
    kind = "others" if mode & 0o002 else "its group"
    assert line is not None and "\n" not in line, line
    assert line.startswith(f"{str(tmp_path)!r}: received a directory {kind} can write "
                           f"(mode {mode:o}) without the sticky bit"), line
    assert "symlink" in line and "Fix: " in line and "only you can write" in line


def test_a_run_dir_of_another_user_is_named_in_one_line(shared):
    theirs = os.path.join(shared.run, "theirs")
    _as_nobody("mkdir", "-m", "755", theirs)
    line = private_files.shared_dir_warning(theirs)
    assert line is not None and "\n" not in line
    assert line.startswith(f"{theirs!r}: received a directory owned by uid 65534 (nobody)"), line
    assert "Fix: " in line


def test_a_private_dir_whose_mode_cannot_be_set_is_refused_and_not_left_open(tmp_path,
                                                                              monkeypatch):
    """A directory of ours that fchmod cannot take back (a read-only mount, say): one
    Refused line, and its fd is closed (a relaunch loop would otherwise run out of fds)."""
    os.chmod(tmp_path, 0o777)

    def refuse(fd, mode):
        raise PermissionError(1, "Operation not permitted")

    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(private_files.os, "fchmod", refuse)
    with pytest.raises(private_files.Refused, match="Operation not permitted"):
        private_files.PrivateDir.open(str(tmp_path), create=False)
    monkeypatch.undo()
    assert set(os.listdir("/proc/self/fd")) <= before


def _decoy_stacks(directory):
    """A stacks dir of ours from another run: a rank that stood somewhere else."""
    os.makedirs(directory)
    with open(os.path.join(directory, "rank0.json"), "w") as f:
        json.dump({"pid": 1, "host": "decoy", "main_thread": "0x0000000000000001"}, f)
    with open(os.path.join(directory, "rank0.txt"), "w") as f:
        f.write('== 00:00:00 planted\nCurrent thread 0x0000000000000001 (most recent call '
                'first):\n  File "/src/decoy.py", line 1 in planted\n')
    with open(os.path.join(directory, "rank0.where.json"), "w") as f:
        json.dump({"reason": "planted", "time": time.time() + 3600, "where": None}, f)


def test_the_chief_reads_the_stacks_dir_it_checked_not_one_swapped_in(shared, tmp_path,
                                                                      capsys):
    """`nobody` renames our RUN/stacks away (RUN lets it) and links RUN/stacks to an old
    stacks dir of ours: the summary still reads this run's dumps, through the directory
    the rank opened and checked."""
    decoy = str(tmp_path / "old-run" / "stacks")
    _decoy_stacks(decoy)
    dump = stacks.StackDump(shared.stacks, 0).install()
    try:
        _as_nobody("mv", shared.stacks, os.path.join(shared.run, "moved"))
        _as_nobody("ln", "-s", decoy, shared.stacks)
        stacks.report(dump, 1, True, "the watchdog fired", wait_s=5)
    finally:
        dump.close()
    shown = capsys.readouterr().err
    assert "decoy.py" not in shown, shown
    # this run's dump: made by report() itself, the innermost frame of ours
    assert "stacks | rank 0: not in a collective, at stacks.py:" in shown, shown


def test_launch_stacks_lists_the_ranks_of_the_dir_it_opened(shared, tmp_path):
    """The same swap, between opening RUN/stacks and listing its ranks: the ranks and
    dumps read are those of the directory opened."""
    decoy = str(tmp_path / "old-run" / "stacks")
    _decoy_stacks(decoy)
    dump = stacks.StackDump(shared.stacks, 0).install()
    try:
        directory = private_files.PrivateDir.open(shared.stacks, create=False)
        _as_nobody("mv", shared.stacks, os.path.join(shared.run, "moved"))
        _as_nobody("ln", "-s", decoy, shared.stacks)
        with directory:
            ranks = reader._ranks(directory)
            lines = reader.summary(directory, 1)
    finally:
        dump.close()
    assert ranks[0]["host"] != "decoy" and ranks[0]["pid"] == os.getpid(), ranks
    assert "decoy" not in " ".join(lines), lines


def test_native_output_is_dropped_when_the_process_changed_while_py_spy_ran(tmp_path,
                                                                           monkeypatch):
    """The rank ends while py-spy reads it (here: a py-spy that kills it first, as a
    rank's own exit would): what py-spy printed is not kept as the rank's frames."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    identity = reader.process_identity(target.pid)
    spy = tmp_path / "bin" / "py-spy"
    spy.parent.mkdir()
    # Kills the pid, waits until its exit is visible, then prints frames that are not it.
    spy.write_text("#!/bin/sh\nkill -9 \"$4\"\nsleep 0.5\necho 'Thread 1: planted frames'\n")
    spy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{spy.parent}{os.pathsep}{os.environ['PATH']}")
    run = tmp_path / "stacks"
    try:
        with private_files.PrivateDir.open(str(run)) as directory:
            info = {"pid": target.pid, "host": "here", **identity}
            assert reader.not_the_rank(info) is None
            status = reader._native(directory, 0, info)
    finally:
        target.kill()
        target.wait()
    assert not (run / "rank0.native.txt").exists(), status
    assert status.startswith("no native frames: pid ") and "while py-spy read it" in status, \
        status
