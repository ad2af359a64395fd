"""Checkpoint files: atomic writes, keep-N, corrupt and foreign checkpoints. No TF needed:
the writer takes any array-likes, so numpy arrays stand in for variables."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from horovod_train import checkpoint
from horovod_train import config as cfg
from horovod_train.errors import UsageError

CONFIG = cfg.RunConfig()
STATE = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int64)]


def _arrays(step):
    return [a + step for a in STATE]


def test_save_then_load_round_trip_and_keep_n(tmp_path):
    for step in (10, 20, 30, 40):
        checkpoint.save(str(tmp_path), step, _arrays(step), CONFIG, keep=2)
    assert [s for s, _ in checkpoint.list_checkpoints(str(tmp_path))] == [40, 30]
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, len(STATE))
    assert step == 40
    for got, want in zip(arrays, _arrays(40)):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def test_corrupt_newest_is_skipped_for_the_previous(tmp_path, caplog):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    newest = checkpoint.save(str(tmp_path), 20, _arrays(20), CONFIG, keep=3)
    with open(os.path.join(newest, "state.npz"), "r+b") as f:
        f.truncate(40)
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, len(STATE))
    assert step == 10
    np.testing.assert_array_equal(arrays[0], _arrays(10)[0])
    assert "ckpt-000000020" in caplog.text and "unreadable" in caplog.text


def test_checkpoint_of_another_config_is_refused_naming_the_difference(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    other = cfg.RunConfig(model="digits_mlp", data=cfg.DataConfig(batch_size=64))
    with pytest.raises(UsageError) as err:
        checkpoint.load_latest(str(tmp_path), other, len(STATE))
    message = str(err.value)
    assert "model: checkpoint 'digits_cnn', now 'digits_mlp'" in message
    assert "data.batch_size: checkpoint 32, now 64" in message and "Fix" in message


_KILLED_WRITER = """
import os, signal, sys
import numpy as np
from horovod_train import checkpoint, config
real_rename = os.rename
def die_before_commit(src, dst):
    os.kill(os.getpid(), signal.SIGKILL)  # state.npz and meta.json are written, not renamed
os.rename = die_before_commit
checkpoint.save(sys.argv[1], 20, [np.full((2, 3), 99.0, np.float32), np.array(1)],
                config.RunConfig(), keep=3)
"""


def test_writer_killed_between_write_and_rename_leaves_previous_intact(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    partials = [n for n in os.listdir(tmp_path) if n.startswith(".partial-ckpt-")]
    assert partials and os.path.exists(tmp_path / partials[0] / "state.npz")  # killed mid-way
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, len(STATE))
    assert step == 10
    np.testing.assert_array_equal(arrays[0], _arrays(10)[0])
    checkpoint.save(str(tmp_path), 30, _arrays(30), CONFIG, keep=3)  # next save cleans up
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".partial-ckpt-")]


def _tmpfs(path, options):
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


def test_disk_full_is_a_clear_error_and_keeps_the_previous(tmp_path):
    small = tmp_path / "small"
    _tmpfs(small, "size=64k")
    try:
        checkpoint.save(str(small), 10, _arrays(10), CONFIG, keep=3)
        big = [np.ones((256, 256), np.float32)]  # 256 KiB: more than the disk holds
        with pytest.raises(UsageError) as err:
            checkpoint.save(str(small), 20, big + STATE[1:], CONFIG, keep=3)
        assert "No space left" in str(err.value) and "untouched" in str(err.value)
        assert [s for s, _ in checkpoint.list_checkpoints(str(small))] == [10]
        assert not [n for n in os.listdir(small) if n.startswith(".partial")]
        assert checkpoint.load_latest(str(small), CONFIG, len(STATE))[0] == 10
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_read_only_dir_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    _tmpfs(ro, "ro,size=64k")
    try:
        with pytest.raises(UsageError) as err:
            checkpoint.save(str(ro), 10, _arrays(10), CONFIG, keep=3)
        assert "Read-only file system" in str(err.value) and "--checkpoint_dir" in str(err.value)
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.parametrize("value", ["0", "-3", "e", "2x", "1.5"])
def test_bad_checkpoint_cadence_is_rejected(value):
    with pytest.raises(UsageError, match="--checkpoint_every"):
        cfg.TrainConfig(checkpoint_every=value)


def test_cadence_in_steps_or_epochs():
    assert cfg.TrainConfig(checkpoint_every="500").checkpoint_interval(22) == 500
    assert cfg.TrainConfig(checkpoint_every="2e").checkpoint_interval(22) == 44
