"""Issue 42 item 4: checkpoints on a filesystem without atomic rename, proven on
TensorFlow's ram:// (a directory "rename" there moves the name without its files; it
lives inside one process, so everything here runs in this one). Written under the final
name with a COMMIT marker last; only committed ones are loaded or counted; a torn write
is never picked, and the writer cleans what is provably its own leftover. A real child
killed mid-write on such a filesystem: tests/unit/test_checkpoint_commit.py."""
import json
import logging

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from horovod_train import checkpoint, fs  # noqa: E402
from horovod_train import checkpoint_commit as commit  # noqa: E402
from horovod_train import config as cfg  # noqa: E402

CONFIG = cfg.RunConfig()
STATE = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int64)]
WHOLE = ["COMMIT", "meta.json", "state.npz"]


def _arrays(step):
    return [a + step for a in STATE]


def _steps(directory) -> list[int]:
    return [step for step, _ in checkpoint.list_checkpoints(directory)]


def _loads(directory, step):
    found, arrays = checkpoint.load_latest(directory, CONFIG, STATE)
    assert found == step
    for got, want in zip(arrays, _arrays(step)):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def _copy(src: str, dst: str, files):
    """A torn write, made by hand: some of a whole checkpoint's files, copied."""
    tf.io.gfile.makedirs(dst)
    for name in files:
        tf.io.gfile.copy(f"{src}/{name}", f"{dst}/{name}")


def test_save_load_and_keep_n_on_ram(ram):
    directory = f"{ram}/ck"
    assert not fs.renames_atomically(directory)
    for step in (10, 20, 30, 40):
        checkpoint.save(directory, step, _arrays(step), CONFIG, keep=2)
    assert _steps(directory) == [40, 30]
    assert sorted(fs.listdir(directory)) == ["ckpt-000000030", "ckpt-000000040"]
    assert sorted(fs.listdir(f"{directory}/ckpt-000000040")) == WHOLE
    marker = json.loads(fs.read_text(f"{directory}/ckpt-000000040/COMMIT"))
    assert marker["step"] == 40
    assert marker["files"]["state.npz"]["size"] == fs.stat(
        f"{directory}/ckpt-000000040/state.npz").size
    assert json.loads(fs.read_text(f"{directory}/ckpt-000000040/meta.json"))["commit"] == "marker"
    _loads(directory, 40)


def test_a_torn_write_is_never_picked_and_the_writer_cleans_only_its_own(ram, caplog):
    directory = f"{ram}/ck"
    whole = checkpoint.save(directory, 10, _arrays(10), CONFIG, keep=5)
    damaged = checkpoint.save(directory, 40, _arrays(40), CONFIG, keep=5)
    # Files present, marker absent: the write was cut before its commit.
    _copy(whole, f"{directory}/ckpt-000000050", ["meta.json", "state.npz"])
    # A marker whose sizes do not match: state.npz damaged after its commit.
    with tf.io.gfile.GFile(f"{damaged}/state.npz", "wb") as f:
        f.write(b"x")  # ram:// "wb" appends: now one byte longer than marked
    # A marker for another step (a whole checkpoint copied under a new name).
    _copy(whole, f"{directory}/ckpt-000000030", WHOLE)
    # A write cut before meta.json, and one cut between its open and its first byte.
    tf.io.gfile.makedirs(f"{directory}/ckpt-000000020")
    _copy(whole, f"{directory}/ckpt-000000015", ["meta.json"])
    tf.io.gfile.GFile(f"{directory}/ckpt-000000015/COMMIT", "wb").close()
    for step in (50, 40, 30, 20, 15):
        assert commit.inspect(f"{directory}/ckpt-{step:09d}").why_not, step
    with caplog.at_level(logging.WARNING):
        _loads(directory, 10)
    skipped = [r.getMessage() for r in caplog.records if "trying the previous" in r.getMessage()]
    assert len(skipped) == 5, skipped
    assert "ckpt-000000050 is unreadable (not committed: no COMMIT marker; a write" in skipped[0]
    assert "state.npz has" in skipped[1] and "marker is for step 10" in skipped[2]

    caplog.clear()
    checkpoint.save(directory, 60, _arrays(60), CONFIG, keep=2)
    # Cut-short writes of this code are gone; the damaged and the misnamed, both with a
    # marker, are left for a person and not counted: 60 and 10 are kept.
    assert _steps(directory) == [60, 40, 30, 10]
    left = [r.getMessage() for r in caplog.records if "left alone" in r.getMessage()]
    assert len(left) == 1 and "ckpt-000000040" in left[0] and "ckpt-000000030" in left[0]
    _loads(directory, 60)


def test_a_checkpoint_of_an_older_version_counts_only_where_renames_are_atomic(ram, tmp_path):
    """Older versions committed by rename alone (no marker): trusted on a local disk,
    where such a directory appeared whole; on ram:// only a marker commits, and a copy
    of one is left alone (not loaded, not counted, not deleted)."""
    for directory in (str(tmp_path / "ck"), f"{ram}/ck"):
        checkpoint.save(directory, 10, _arrays(10), CONFIG, keep=5)
        old = checkpoint.save(directory, 20, _arrays(20), CONFIG, keep=5)
        meta = json.loads(fs.read_text(f"{old}/meta.json"))
        del meta["commit"]
        for name in ("COMMIT", "meta.json"):  # ram:// "wb" appends: remove, then write
            fs.remove(f"{old}/{name}")
        fs.write_stream(f"{old}/meta.json", lambda f: f.write(json.dumps(meta).encode()))
        local = fs.renames_atomically(directory)
        _loads(directory, 20 if local else 10)
        checkpoint.save(directory, 30, _arrays(30), CONFIG, keep=1)
        assert _steps(directory) == ([30] if local else [30, 20])
        assert local == (directory == str(tmp_path / "ck"))
