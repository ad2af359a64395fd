"""A disk that fills mid-run, or a path that cannot be a directory: one UsageError line
naming the flag and the path, never a raw OSError (issue 17, item 10). TF-free.

The full disk is real: a 64 KiB tmpfs (needs root, as CI runs; skipped otherwise).
"""
import contextlib
import os
import subprocess

import numpy as np
import pytest

from horovod_train import config as cfg
from horovod_train import metrics
from horovod_train.errors import UsageError
from horovod_train.observe import observer as observer_lib


@contextlib.contextmanager
def tiny_tmpfs(path, size="64k"):
    """A real filesystem that fills up: mounted at `path`, unmounted on exit."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory, leave=0):
    """Writes a ballast file until at most `leave` bytes are free."""
    with open(os.path.join(directory, "ballast"), "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
                if free <= leave:
                    break
                f.write(b"\0" * min(4096, free - leave))
                f.flush()


@pytest.fixture
def full_disk(tmp_path):
    with tiny_tmpfs(tmp_path / "full") as mnt:
        fill(mnt)
        yield mnt


def _assert_one_line(err, flag, path):
    message = str(err.value)
    assert message.startswith(f"{flag}: cannot write {path} (No space left on device)"), message
    assert "; expected " in message and ". Fix: " in message and "\n" not in message
    assert "--checkpoint_dir is untouched" in message, message


def test_summary_on_a_full_disk_is_one_line_and_leaves_no_partial_file(full_disk):
    path = os.path.join(full_disk, "summary.json")
    with pytest.raises(UsageError) as err:
        metrics.write_json_atomic(path, {"steps": 1, "blob": "x" * 100_000})
    _assert_one_line(err, "--summary_json", path)
    assert sorted(os.listdir(full_disk)) == ["ballast"]


class _Var:
    def __init__(self, name, value):
        self.path, self.value = name, value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype=dtype)


def test_export_weights_on_a_full_disk_is_one_line(full_disk):
    path = os.path.join(full_disk, "weights.npz")
    with pytest.raises(UsageError) as err:
        metrics.write_npz_atomic(path, [_Var("dense/kernel", np.ones((64, 64), np.float32))])
    _assert_one_line(err, "--export_weights", path)
    assert sorted(os.listdir(full_disk)) == ["ballast"]


def test_a_path_under_a_regular_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    path = str(tmp_path / "afile" / "summary.json")
    with pytest.raises(UsageError, match=r"^--summary_json: cannot write .*afile.*Fix: "):
        metrics.write_json_atomic(path, {})


class _FakeScalars:
    """Stands in for TensorBoard's writer (TF): these tests are about metrics.jsonl."""

    def __init__(self, logdir, tag_sets=(), **_):
        os.makedirs(logdir, exist_ok=True)

    def write(self, step, scalars):
        pass

    def close(self):
        pass


def _observer(monkeypatch, run_dir):
    monkeypatch.setattr("horovod_train.observe.tensorboard.ScalarWriter", _FakeScalars)
    config = cfg.RunConfig(observe=cfg.ObserveConfig(run_dir=str(run_dir), baseline_cache=""))
    return observer_lib.create(config, True, 1, 1000, {"world_size": 1})


def _record(step):
    return {"step": step, "steps": 1, "total_steps": 1000, "loss": 0.5, "samples_per_sec": 100.0,
            "samples_per_sec_per_rank": [100.0], "seconds_per_step": {"data": 0.01, "step": 0.1},
            "pad": "x" * 2000}


def test_metrics_jsonl_filling_mid_run_surfaces_at_the_next_interval(monkeypatch, tmp_path):
    with tiny_tmpfs(tmp_path / "full") as mnt:
        fill(mnt, leave=16 * 1024)
        run_dir = os.path.join(mnt, "run")
        obs = _observer(monkeypatch, run_dir)
        with pytest.raises(UsageError) as err:
            for step in range(1, 1000):  # ~2 KB a record: the disk fills within ~10
                obs.interval(_record(step))
                obs._writer.flush()
        path = os.path.join(run_dir, "metrics.jsonl")
        message = str(err.value)
        assert message.startswith(f"--run_dir: cannot write {path} (No space left on device)")
        assert "Fix: free space or point --run_dir elsewhere" in message
        assert "--checkpoint_dir is untouched" in message and "\n" not in message
        with pytest.raises(UsageError):  # and close says it again rather than hiding it
            obs.close({"steps": step, "samples_per_sec": 1.0, "wall_seconds": 1.0,
                       "test_accuracy": 0.5})


def test_a_run_dir_under_a_regular_file_is_one_line(monkeypatch, tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match=r"^--run_dir: cannot write .*afile/run.*Fix: "):
        _observer(monkeypatch, tmp_path / "afile" / "run")
