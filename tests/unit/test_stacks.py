"""horovod_train/stacks.py writes each rank's dumps; launch/stacks.py reads them: the
frame a summary names, and who waits for whom."""
import dataclasses
import json
import logging
import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from horovod_train import stacks
from launch import stacks as reader
from launch.errors import LaunchError
from launch.private_files import PrivateDir

DUMP = """== 10:00:00 the watchdog fired
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/src/horovod_train/stacks.py", line 100 in _serve

Current thread 0x00007f0000000001 (most recent call first):
  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute
  File "/src/horovod_train/backends/base.py", line 80 in run_step_fed
  File "/src/horovod_train/trainer.py", line 245 in _run
  File "<frozen runpy>", line 88 in _run_code
"""


def test_the_innermost_frame_of_the_main_thread_outside_the_machinery():
    assert reader.innermost_frame(DUMP, "0x00007f0000000001") == "base.py:80 in run_step_fed"
    assert reader.innermost_frame(DUMP, "0x00007f0000000002") == "stacks.py:100 in _serve"
    assert reader.innermost_frame(DUMP, None) == "stacks.py:100 in _serve"  # the first listed
    assert reader.innermost_frame(DUMP, "0x00007f00000000ff") is None


def test_the_last_dump_of_a_file_is_the_one_read():
    older = DUMP.replace("line 80 in run_step_fed", "line 1 in older")
    assert reader.last_dump(older + DUMP) == DUMP


def _rank_files(directory, rank, dump=None, where=None, when=None):
    with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
        json.dump({"pid": 100 + rank, "host": "h1", "main_thread": "0x00007f0000000001"}, f)
    if dump is not None:
        with open(os.path.join(directory, f"rank{rank}.txt"), "w") as f:
            f.write(dump)
        with open(os.path.join(directory, f"rank{rank}.where.json"), "w") as f:
            json.dump({"reason": "test", "time": when or time.time(), "where": where}, f)


def test_the_summary_names_where_each_rank_is_and_who_the_others_wait_for(tmp_path):
    d = str(tmp_path)
    now = time.time()
    _rank_files(d, 0, DUMP, {"collective": "the step's gradient allreduce", "step": 7,
                             "bytes": 2_500_000, "since": now - 12}, now)
    _rank_files(d, 1, DUMP.replace("line 80 in run_step_fed", "line 244 in _one_step")
                .replace("backends/base.py", "trainer.py"))
    _rank_files(d, 2)  # registered, never dumped: gone
    with PrivateDir.open(d) as directory:
        lines = reader.summary(directory, 4)  # rank 3: not even registered
    assert lines[0] == ("rank 0: in the step's gradient allreduce (step 7, 2.5 MB) for 12 s, "
                        "at base.py:80 in run_step_fed")
    assert lines[1] == "rank 1: not in a collective, at trainer.py:244 in _one_step"
    assert lines[2].startswith("rank 2 (pid 102 on h1): no stack written: gone")
    assert lines[3].startswith("rank 3: no stack written")
    assert lines[4] == "rank 0 waits for ranks 1, 2, 3"


def test_waiting_for_dumps_names_the_ranks_that_made_none(tmp_path):
    d = str(tmp_path)
    _rank_files(d, 0, DUMP, None, when=time.time())
    _rank_files(d, 1, DUMP, None, when=time.time() - 3600)  # an old dump: not this one
    with PrivateDir.open(d) as directory:
        assert reader.wait_for_dumps(directory, 3, time.time() - 60, timeout_s=0.3) == [1, 2]


def test_whereabouts_nest_and_restore():
    where = stacks.Whereabouts()
    assert where.snapshot() is None
    with where.entering("the step", 3, 10):
        with where.entering("a gather", 3):
            assert where.snapshot()["collective"] == "a gather"
        assert where.snapshot()["collective"] == "the step"
    assert where.snapshot() is None


def test_a_rank_answers_a_request_with_its_stacks_and_where_it_waits(tmp_path):
    directory = str(tmp_path / "stacks")
    dump = stacks.StackDump(directory, 0).install()
    try:
        assert json.load(open(os.path.join(directory, "rank0.json")))["pid"] == os.getpid()
        with dump.where.entering("a test collective", 5, 1000):
            asked = time.time()
            time.sleep(0.01)
            with open(os.path.join(directory, reader.REQUEST), "w") as f:
                f.write("now\n")
            assert reader.wait_for_dumps(dump.private_dir, 1, asked, timeout_s=10) == []
        line = reader.describe_rank(dump.private_dir, 0)
        assert line.startswith("rank 0: in a test collective (step 5, 1000 bytes) for ")
        # The main thread's innermost frame of ours: this test, waiting for the dump.
        assert line.endswith("in wait_for_dumps") and "at stacks.py:" in line
    finally:
        dump.close()
    assert not any(t.name == "stack-requests" for t in threading.enumerate())


def _collective_that_fails():
    raise RuntimeError("a peer went away")


def test_after_a_failed_collective_the_dump_says_where_it_raised_and_which_it_was(tmp_path):
    directory = str(tmp_path / "stacks")
    dump = stacks.StackDump(directory, 0).install()
    try:
        try:
            with dump.where.entering("the interval's metrics gather", 9):
                _collective_that_fails()
        except RuntimeError as err:
            dump.dump("a peer was lost", err)
        line = reader.describe_rank(dump.private_dir, 0)
    finally:
        dump.close()
    assert line.startswith("rank 0: in the interval's metrics gather (step 9) for ")
    raised_at = _collective_that_fails.__code__.co_firstlineno + 1
    assert line.endswith(f"at test_stacks.py:{raised_at} in _collective_that_fails"), line


# ------------------------------------------- a run dir other users can write (issue 55, 1)
# Another local user (`nobody`, for real, through runuser) pre-creates RUN/stacks or plants
# symlinks to a file of ours (a shell profile) and requests there; the ranks and `launch
# stacks` must write nothing through them, refuse what is not ours in one line, and keep
# their own files owner-only.

PROFILE = "export PATH=/usr/bin\n"


@dataclasses.dataclass(frozen=True)
class Shared:
    run: str  # a run dir anyone may write (group-writable project storage, say)
    victim: pathlib.Path  # a file of ours that `nobody` points links at

    @property
    def stacks(self) -> str:
        return os.path.join(self.run, reader.DIR_NAME)


def _as_nobody(*argv):
    subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True, cwd="/",
                   capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.fixture
def shared(tmp_path):
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.fail("acting as another user (`nobody`) takes root and runuser; expected "
                    "both (CI runs as root). Fix: run the suite as root")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.fail("no user `nobody` on this machine; expected Debian's. Fix: "
                    "useradd --system --no-create-home nobody")
    run = tempfile.mkdtemp(prefix="shared-run-", dir="/tmp")
    os.chmod(run, 0o777)
    victim = tmp_path / "profile"  # in a directory `nobody` cannot even enter
    victim.write_text(PROFILE)
    yield Shared(run, victim)
    shutil.rmtree(run)


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _plant_links(directory, victim, pid):
    """The links of the issue: a dump's temporary names and its final ones, to the victim."""
    for name in (f"rank0.where.json.{pid}.tmp", f"rank0.json.{pid}.tmp", "rank0.where.json",
                 "rank0.json", "rank0.txt"):
        _as_nobody("ln", "-s", str(victim), os.path.join(directory, name))


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("made_as", ["a directory", "a symlink"])
def test_ranks_refuse_a_stacks_dir_another_user_made_and_write_nothing_through_it(
        shared, caplog, made_as):
    """The issue's case: `nobody` made RUN/stacks (or a link there to a directory of its
    own), planted the links and a fresh REQUEST. The rank says so in one line, dumps
    nothing, and goes on (install returns, dump and report are no-ops)."""
    theirs = shared.stacks if made_as == "a directory" else os.path.join(shared.run, "theirs")
    _as_nobody("mkdir", "-m", "777", theirs)
    if made_as == "a symlink":
        _as_nobody("ln", "-s", theirs, shared.stacks)
    _plant_links(theirs, shared.victim, os.getpid())
    _as_nobody("touch", "-d", "+1 hour", os.path.join(theirs, reader.REQUEST))
    before = sorted(os.listdir(theirs))
    with caplog.at_level(logging.WARNING):
        dump = stacks.StackDump(shared.stacks, 0).install()
        try:
            dump.dump("on request")
            stacks.report(dump, 2, True, "the watchdog fired", wait_s=0.1)
        finally:
            dump.close()
    assert shared.victim.read_text() == PROFILE
    assert sorted(os.listdir(theirs)) == before
    lines = _refusals(caplog)
    assert len(lines) == 1, lines
    found = "uid 65534 (nobody)" if made_as == "a directory" else "a symlink"
    assert lines[0].startswith(f"stacks | {shared.stacks!r}: received {made_as}"), lines[0]
    assert found in lines[0] and "expected a directory owned by you" in lines[0], lines[0]
    assert "Fix: " in lines[0] and lines[0].endswith("this run goes on without stack dumps")


def test_in_our_stacks_dir_left_open_the_planted_links_are_replaced_never_followed(shared):
    """RUN/stacks is ours but was left writable by all (an older version, umask 000):
    `nobody` planted links at every name a dump writes. The rank takes the directory back
    (0700) and creates its files anew (O_EXCL, O_NOFOLLOW): the links' target is untouched,
    and each file is a regular file of ours, 0600."""
    os.mkdir(shared.stacks)
    os.chmod(shared.stacks, 0o777)
    _plant_links(shared.stacks, shared.victim, os.getpid())
    dump = stacks.StackDump(shared.stacks, 0).install()
    try:
        dump.dump("on request")
    finally:
        dump.close()
    assert shared.victim.read_text() == PROFILE
    assert _mode(shared.stacks) == 0o700
    for name in ("rank0.json", "rank0.txt", "rank0.where.json"):
        found = os.lstat(os.path.join(shared.stacks, name))
        assert stat.S_ISREG(found.st_mode) and found.st_uid == os.geteuid(), name
        assert stat.S_IMODE(found.st_mode) == 0o600, (name, oct(found.st_mode))
    assert "on request" in open(os.path.join(shared.stacks, "rank0.txt")).read()


def test_a_request_another_user_planted_is_ignored_in_one_line(shared, caplog):
    """A REQUEST of `nobody`'s (planted while our stacks dir was open, dated an hour ahead)
    does not trigger dumps: only our own requests count."""
    os.mkdir(shared.stacks)
    os.chmod(shared.stacks, 0o777)
    request = os.path.join(shared.stacks, reader.REQUEST)
    _as_nobody("touch", "-d", "+1 hour", request)
    with caplog.at_level(logging.WARNING):
        dump = stacks.StackDump(shared.stacks, 0).install()
        try:  # the rank says so when it first looks, and then decides not to dump
            deadline = time.monotonic() + 10
            while not _refusals(caplog) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(stacks.POLL_S)  # and at the next look
        finally:
            dump.close()
    assert not os.path.exists(os.path.join(shared.stacks, "rank0.where.json"))
    lines = _refusals(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"stacks | {request!r}: received a file "
                                                   f"owned by uid 65534 (nobody)"), lines


def test_launch_stacks_refuses_a_stacks_dir_of_another_user_and_writes_nothing(shared):
    _as_nobody("mkdir", "-m", "777", shared.stacks)
    _as_nobody("cp", "/dev/null", os.path.join(shared.stacks, "rank0.json"))
    _as_nobody("ln", "-s", str(shared.victim), os.path.join(shared.stacks, reader.REQUEST))
    with pytest.raises(LaunchError) as err:
        reader.dump_live(reader.StacksRequest(shared.run, wait_s=0.1))
    assert str(err.value).startswith(f"{shared.stacks!r}: received a directory owned by uid "
                                     f"65534 (nobody)"), err.value
    assert "\n" not in str(err.value)
    assert shared.victim.read_text() == PROFILE
    assert sorted(os.listdir(shared.stacks)) == [reader.REQUEST, "rank0.json"]


def test_launch_stacks_refuses_a_request_that_is_a_link_and_leaves_its_target(shared):
    """Our stacks dir, left open: `nobody` made REQUEST a link to the victim."""
    dump = stacks.StackDump(shared.stacks, 0).install()
    dump.close()
    os.chmod(shared.stacks, 0o777)
    request = os.path.join(shared.stacks, reader.REQUEST)
    _as_nobody("ln", "-s", str(shared.victim), request)
    with pytest.raises(LaunchError) as err:
        reader.dump_live(reader.StacksRequest(shared.run, wait_s=0.1))
    assert str(err.value).startswith(f"{request!r}: received a symlink"), err.value
    assert "Fix: remove it" in str(err.value)
    assert shared.victim.read_text() == PROFILE


def test_stack_files_and_requests_are_owner_only(tmp_path):
    """Under the usual umask (022: files 0644) the stack files are 0600 in a 0700 dir:
    they hold paths, host names and pids, and only their owner may read or plant them."""
    old = os.umask(0o022)
    try:
        dump = stacks.StackDump(str(tmp_path / "run" / "stacks"), 0).install()
        try:
            shown = reader.dump_live(reader.StacksRequest(str(tmp_path / "run"), wait_s=10))
        finally:
            dump.close()
    finally:
        os.umask(old)
    assert "rank 0: not in a collective" in shown, shown
    directory = tmp_path / "run" / "stacks"
    assert _mode(directory) == 0o700
    names = sorted(os.listdir(directory))
    assert names == [reader.REQUEST, "rank0.json", "rank0.txt", "rank0.where.json"], names
    assert {name: _mode(directory / name) for name in names} == {n: 0o600 for n in names}


def test_the_stack_file_keeps_the_newest_dumps_under_its_cap(tmp_path, monkeypatch):
    """Dumps on request for hours must not fill a disk: past the cap the oldest dumps go,
    whole, and the newest stays whole."""
    monkeypatch.setattr(stacks, "MAX_DUMP_BYTES", 16_000, raising=False)
    dump = stacks.StackDump(str(tmp_path / "stacks"), 0).install()
    path = tmp_path / "stacks" / "rank0.txt"
    sizes = []
    try:
        for i in range(40):  # a dump of this process is 1-3 kB
            dump.dump(f"request {i}")
            sizes.append(path.stat().st_size)
    finally:
        dump.close()
    text = path.read_text()
    assert max(sizes) <= 16_000, sizes
    assert text.startswith("== ") and "request 0\n" not in text
    assert reader.last_dump(text).split("\n", 1)[0].endswith(" request 39")
    assert _mode(path) == 0o600


def _child_of(pid: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        if found.stdout.split():
            return int(found.stdout.split()[0])
        time.sleep(0.05)
    raise AssertionError(f"process {pid} started no child in 10 s")


def test_native_frames_only_of_a_process_that_is_the_rank(shared, monkeypatch):
    """`--native` attaches py-spy to a pid only when the process is the rank that
    registered it: a stale rank0.json (its job ended, the pid now another process of
    ours) gets a note and no py-spy; so does a process of another user's."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    if shutil.which("py-spy") is None:
        pytest.fail("py-spy is not installed; expected requirements.txt's pin. Fix: make setup")
    dump = stacks.StackDump(shared.stacks, 0).install()
    record = json.load(open(os.path.join(shared.stacks, "rank0.json")))
    dump.close()
    assert reader.not_the_rank(record) is None  # this very process: the rank
    impostor = subprocess.Popen(["sleep", "60"])
    theirs = subprocess.Popen(["runuser", "-u", "nobody", "--", "sleep", "60"], cwd="/")
    try:
        their_pid = _child_of(theirs.pid)  # runuser's child: sleep, as nobody
        assert "another user's" in reader.not_the_rank(
            dict(record, pid=their_pid, **reader.process_identity(their_pid)))
        stale = dict(record, pid=impostor.pid)  # what it recorded: its own start, not sleep's
        with open(os.path.join(shared.stacks, "rank0.json"), "w") as f:
            json.dump(stale, f)
        shown = reader.dump_live(reader.StacksRequest(shared.run, wait_s=0.1, native=True))
    finally:
        for proc in (impostor, theirs):
            proc.kill()
            proc.wait()
    assert not os.path.exists(os.path.join(shared.stacks, "rank0.native.txt")), shown
    assert re.search(rf"rank 0: no native frames: pid {impostor.pid} is another process now",
                     shown), shown
