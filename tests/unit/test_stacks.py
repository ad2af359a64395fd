"""horovod_train/stacks.py writes each rank's dumps; launch/stacks.py reads them: the
frame a summary names, and who waits for whom."""
import json
import os
import threading
import time

from horovod_train import stacks
from launch import stacks as reader

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
    lines = reader.summary(d, 4)  # rank 3: not even registered
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
    assert reader.wait_for_dumps(d, 3, time.time() - 60, timeout_s=0.3) == [1, 2]


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
            assert reader.wait_for_dumps(directory, 1, asked, timeout_s=10) == []
        line = reader.describe_rank(directory, 0)
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
        line = reader.describe_rank(directory, 0)
    finally:
        dump.close()
    assert line.startswith("rank 0: in the interval's metrics gather (step 9) for ")
    raised_at = _collective_that_fails.__code__.co_firstlineno + 1
    assert line.endswith(f"at test_stacks.py:{raised_at} in _collective_that_fails"), line
