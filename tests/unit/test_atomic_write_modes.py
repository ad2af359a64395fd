"""The atomic writers give what the umask allows, not mkstemp's 0600 / mkdtemp's 0700
(issue 22, part 6). No TF: numpy arrays stand in for variables. The whole run's files
are checked in tests/e2e/test_file_modes.py."""
import os
import stat

import numpy as np
import pytest

from horovod_train import checkpoint, filemode, metrics
from horovod_train import config as cfg


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


class _Var:
    path = "dense/kernel"

    def __array__(self, dtype=None, copy=None):
        return np.ones((2, 2), np.float32)


def test_the_umask_is_read_from_proc_and_left_unchanged(umask):
    assert filemode.umask() == umask
    assert os.umask(umask) == umask  # still set as it was
    assert filemode.new_file_mode() == 0o666 & ~umask
    assert filemode.new_dir_mode() == 0o777 & ~umask


def test_without_proc_the_fallback_reads_it_and_puts_it_back(umask, monkeypatch, tmp_path):
    monkeypatch.setattr(filemode, "_STATUS", str(tmp_path / "no-such-status"))
    assert filemode.umask() == umask
    assert os.umask(umask) == umask


def test_summary_and_weights_get_the_umask_mode(umask, tmp_path):
    summary, weights = tmp_path / "summary.json", tmp_path / "w" / "final.npz"
    metrics.write_json_atomic(str(summary), {"steps": 1})
    metrics.write_npz_atomic(str(weights), [_Var()])
    assert _mode(summary) == _mode(weights) == 0o666 & ~umask
    assert _mode(weights.parent) == 0o777 & ~umask


def test_a_checkpoint_dir_and_its_files_get_the_umask_mode(umask, tmp_path):
    path = checkpoint.save(str(tmp_path / "ck"), 5, [np.arange(3.0)], cfg.RunConfig(), keep=2)
    assert _mode(path) == 0o777 & ~umask
    for name in ("state.npz", "meta.json", "COMMIT"):
        assert _mode(os.path.join(path, name)) == 0o666 & ~umask
