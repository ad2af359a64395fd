"""The training loop on file-backed sources: digits converted to TFRecord and LMDB."""
import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop  # noqa: E402
from horovod_train.data import convert, sources  # noqa: E402


@pytest.mark.parametrize("fmt, cache", [("tfrecord", "memory"), ("lmdb", "")])
def test_local_run_learns_digits_from_converted_files(tmp_path, fmt, cache):
    digits = sources.load_digits(None)
    np.savez(tmp_path / "digits.npz", x_train=digits.x_train, y_train=digits.y_train,
             x_test=digits.x_test, y_test=digits.y_test)
    out = str(tmp_path / fmt)
    convert.convert(convert.ConvertOptions(str(tmp_path / "digits.npz"), out, fmt, num_shards=4,
                                           progress=False))
    config = cfg.RunConfig(
        data=cfg.DataConfig(dataset=fmt, data_dir=out, cache=cache),
        train=cfg.TrainConfig(epochs=2, log_every=20),
        runtime=cfg.RuntimeConfig(backend="local"))
    summary = loop.run(config)
    assert summary["steps"] == 2 * (len(digits.x_train) // 32)
    assert summary["test_accuracy"] >= 0.85
