"""Issue 42 item 4: a writer SIGKILLed mid-write on a filesystem without atomic rename
leaves nothing the loader would take for a checkpoint that is not whole. ram:// dies
with its process, so a real child writes to a local directory with local paths counted
as not renaming atomically (fs.NO_ATOMIC_RENAME_ENV: files under the final name, the
COMMIT marker last, as on gs:// or s3://), and is killed at each point of a write and
of a prune, then at random moments. The same rules on ram:// in one process:
tests/tf/test_checkpoint_gfile.py. No TF: numpy arrays stand in for variables."""
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import ROOT
from horovod_train import checkpoint, fs
from horovod_train import checkpoint_commit as commit
from horovod_train import config as cfg

CONFIG = cfg.RunConfig()
WHOLE = ["COMMIT", "meta.json", "state.npz"]

# Saves steps FIRST, FIRST+10, ... (COUNT of them, or for ever) with keep=2; KILL names
# the point to die at: "<fs function>:<n>" (SIGKILL just before its n-th call), "state:<n>"
# (the n-th state.npz cut half-way), or "" (none). Prints "saved <step>" after each save.
_WRITER = """
import io, os, signal, sys
import numpy as np
from horovod_train import checkpoint, config, fs
directory, first, count, kill = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
where, _, nth = kill.partition(":")
calls = [0]

def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)

def torn(f, names, variables):
    whole = io.BytesIO()
    real_arrays(whole, names, variables)
    f.write(whole.getvalue()[:len(whole.getvalue()) // 2])
    f.flush()
    die()

def die_at_nth(real, dying=die):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        return (dying if calls[0] == int(nth) else real)(*args, **kwargs)
    return wrapper

real_arrays = checkpoint.write_arrays
if where == "state":
    checkpoint.write_arrays = die_at_nth(real_arrays, torn)
elif where:
    setattr(fs, where, die_at_nth(getattr(fs, where)))
step = first
while count == 0 or step < first + 10 * count:
    checkpoint.save(directory, step, [np.full((256, 256), step, np.float32),
                                      np.array(step, np.int64)], config.RunConfig(), keep=2)
    print("saved", step, flush=True)
    step += 10
"""


def _arrays(step):
    return [np.full((256, 256), step, np.float32), np.array(step, np.int64)]


def _writer(directory, first, count=0, kill="", **popen):
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(directory), str(first),
                             str(count), kill], cwd=ROOT, **popen,
                            env=dict(os.environ, PYTHONPATH=ROOT, **{fs.NO_ATOMIC_RENAME_ENV: "1"}))


@pytest.fixture
def not_atomic(monkeypatch):
    """This process reads as the writer wrote: local paths count as not renaming atomically."""
    monkeypatch.setenv(fs.NO_ATOMIC_RENAME_ENV, "1")


def _committed_are_whole(directory) -> list[int]:
    """The steps of the committed checkpoints, each checked whole and equal to what was
    saved; and what the loader picks is the newest of them."""
    committed = []
    for step, path in checkpoint.list_checkpoints(str(directory)):
        if commit.inspect(path).why_not is None:
            assert sorted(os.listdir(path)) == WHOLE, path
            with np.load(os.path.join(path, "state.npz")) as data:
                arrays = [data[name] for name in sorted(data.files)]
            for got, want in zip(sorted(arrays, key=np.ndim), sorted(_arrays(step), key=np.ndim)):
                np.testing.assert_array_equal(got, want)
            committed.append(step)
    found = checkpoint.load_latest(str(directory), CONFIG, _arrays(0))
    assert (found[0] if found else None) == (committed[0] if committed else None)
    if found:
        for got, want in zip(found[1], _arrays(found[0])):
            np.testing.assert_array_equal(got, want)
    return committed


# (where to die, the steps committed then): 3 saves with keep=2, so the third prunes 10.
KILL_POINTS = [
    ("makedirs:6", [20, 10]),      # the third save's directory not yet made
    ("write_stream:7", [20, 10]),  # its directory made, meta.json not begun
    ("write_stream:8", [20, 10]),  # meta.json written, state.npz not begun
    ("state:3", [20, 10]),         # state.npz cut half-way
    ("write_stream:9", [20, 10]),  # both files whole, the marker not written
    ("remove:1", [30, 20, 10]),    # committed; the prune of 10 not begun
    ("remove:2", [30, 20]),        # 10's marker deleted, its files not
    ("remove:3", [30, 20]),        # 10's marker and state.npz deleted
    ("rmtree:1", [30, 20]),        # 10's files deleted, its directory not
]


@pytest.mark.parametrize("kill, committed", KILL_POINTS, ids=[k for k, _ in KILL_POINTS])
def test_a_writer_killed_at_each_point_leaves_only_whole_checkpoints(tmp_path, not_atomic,
                                                                     kill, committed):
    proc = _writer(tmp_path, 10, 3, kill, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert _committed_are_whole(tmp_path) == committed
    # The relaunch resumes after the newest and cleans what the killed one left.
    proc = _writer(tmp_path, committed[0] + 10, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.communicate(timeout=120)[0].split()[-1] == str(committed[0] + 20).encode()
    assert _committed_are_whole(tmp_path) == [committed[0] + 20, committed[0] + 10]
    assert sorted(os.listdir(tmp_path)) == [commit.name(committed[0] + 10),
                                            commit.name(committed[0] + 20)]


def test_a_writer_killed_at_random_moments_never_leaves_a_checkpoint_that_is_not_whole(
        tmp_path, not_atomic):
    rng, first, seen = random.Random(42), 10, set()
    for _ in range(8):
        proc = _writer(tmp_path, first, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline().startswith(b"saved")  # started: kill it in a while
        time.sleep(rng.uniform(0, 0.1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        committed = _committed_are_whole(tmp_path)
        seen.update(os.listdir(tmp_path))
        first = committed[0] + 10
    assert len(seen) > 8  # it really was killed at different steps
