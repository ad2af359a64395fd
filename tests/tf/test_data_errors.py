"""Bad input: missing path, empty directory, corrupt TFRecord / LMDB entries, --skip_corrupt.

Each failure is one UsageError naming the file (and the record index where known)
in the received / expected / Fix form; --skip_corrupt skips and counts instead.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
lmdb = pytest.importorskip("lmdb")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import convert, sharding, writers  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

N = 40
RECORD_BYTES = None  # filled by the fixture: bytes per TFRecord record of this data


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    x = np.arange(N * 4, dtype=np.float32).reshape(N, 2, 2, 1)
    np.savez(root / "a.npz", x=x, y=np.arange(N) % 2)
    for fmt in ("tfrecord", "lmdb"):
        convert.convert(convert.ConvertOptions(str(root / "a.npz"), str(root / fmt), fmt,
                                               num_shards=2, eval_fraction=0.25, progress=False))
    return root


def _copy(clean, fmt, tmp_path):
    return shutil.copytree(clean / fmt, tmp_path / fmt)


def _load(fmt, path, **kw):
    return data.load(cfg.DataConfig(dataset=fmt, data_dir=str(path), **kw))


def _one_line_usage_error(err, *fragments):
    message = str(err.value)
    assert "\n" not in message and "Fix:" in message
    assert "received" in message or ": not given;" in message, message
    for fragment in fragments:
        assert fragment in message, message


def _flip_byte(path, record_index, record_bytes):
    """Flips a payload byte of record `record_index` (all records have one size here)."""
    raw = bytearray(open(path, "rb").read())
    raw[record_index * record_bytes + 12 + 5] ^= 0xFF
    open(path, "wb").write(bytes(raw))


def _train_file(path):
    meta = json.load(open(path / "dataset.json"))
    name = meta["splits"]["train"]["files"][0]
    return path / name, meta["splits"]["train"]["sizes"][0] // meta["splits"]["train"]["records"][0]


def test_missing_path_and_empty_directory_name_the_directory(tmp_path):
    with pytest.raises(UsageError) as err:
        cfg.DataConfig(dataset="tfrecord")
    _one_line_usage_error(err, "--data_dir", "convert")
    with pytest.raises(UsageError) as err:
        cfg.DataConfig(dataset="tfrecord", data_dir=str(tmp_path / "nope"))
    _one_line_usage_error(err, "nope")
    (tmp_path / "empty").mkdir()
    for fmt in ("tfrecord", "lmdb"):
        with pytest.raises(UsageError) as err:
            _load(fmt, tmp_path / "empty")
        _one_line_usage_error(err, "empty directory", str(tmp_path / "empty"))


def test_corrupt_tfrecord_names_the_file_and_record_index(clean, tmp_path):
    path = _copy(clean, "tfrecord", tmp_path)
    target, record_bytes = _train_file(path)
    _flip_byte(target, 3, record_bytes)
    with pytest.raises(UsageError) as err:
        _load("tfrecord", path)
    _one_line_usage_error(err, str(target), "record at index 3", "--skip_corrupt")


def test_truncated_tfrecord_is_caught_without_reading_when_not_verifying(clean, tmp_path):
    path = _copy(clean, "tfrecord", tmp_path)
    target, _ = _train_file(path)
    os.truncate(target, os.path.getsize(target) - 10)
    with pytest.raises(UsageError) as err:
        _load("tfrecord", path, verify_data=False)
    _one_line_usage_error(err, str(target), "bytes", "truncated")
    os.remove(target)
    with pytest.raises(UsageError) as err:
        _load("tfrecord", path, verify_data=False)
    _one_line_usage_error(err, str(target), "missing")


def test_skip_corrupt_tfrecord_counts_and_still_keeps_the_step_contract(clean, tmp_path):
    path = _copy(clean, "tfrecord", tmp_path)
    target, record_bytes = _train_file(path)
    _flip_byte(target, 3, record_bytes)  # the reader cannot go past it: 3..14 are lost
    source = _load("tfrecord", path, skip_corrupt=True)
    assert source.skipped == 15 - 3
    assert source.num_train_examples == 30 - 12
    for world in (1, 2, 3):
        for r in range(world):
            batches = list(source.train_dataset(sharding.ShardInfo(r, world), 2, 0, 0))
            assert len(batches) == source.num_train_examples // (2 * world)


def _put(env_dir, index, value):
    env = lmdb.open(str(env_dir), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(writers.lmdb_key(index), value)
    env.close()


def test_corrupt_lmdb_entry_names_the_environment_and_index(clean, tmp_path):
    path = _copy(clean, "lmdb", tmp_path)
    _put(path / "train.lmdb", 7, b"\x07 not a tf.train.Example")
    with pytest.raises(UsageError) as err:
        _load("lmdb", path)
    _one_line_usage_error(err, str(path / "train.lmdb"), "record index 7", "--skip_corrupt")
    source = _load("lmdb", path, skip_corrupt=True)
    assert source.skipped == 1 and source.num_train_examples == 29
    ids = [int(x[0, 0, 0, 0]) // 4 for x, _ in source.train_dataset(sharding.ShardInfo(0, 1),
                                                                      1, 0, 0)]
    assert len(ids) == 29 and len(set(ids)) == 29


def test_damaged_lmdb_file_is_one_clear_error(clean, tmp_path):
    path = _copy(clean, "lmdb", tmp_path)
    with open(path / "train.lmdb" / "data.mdb", "r+b") as f:
        f.write(b"\0" * 4096)  # wipes the meta page
    with pytest.raises(UsageError) as err:
        _load("lmdb", path)
    _one_line_usage_error(err, str(path / "train.lmdb"))


def test_converter_cli_bad_input_exits_2_with_one_line(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "horovod_train.data", "convert",
                           f"--input={tmp_path / 'missing.npz'}", f"--output_dir={tmp_path / 'o'}"],
                          capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("horovod_train.data")]
    assert len(lines) == 1 and "missing.npz" in lines[0] and "Fix:" in lines[0]
