"""Small record shards are served from memory after their first epoch (issue 23, M6).

A shard that fits the shuffle buffer was read from its files in full at every epoch's
start, before the epoch's first batch: for digits as TFRecords that was ~25 ms quiet and
60-110 ms on a busy host at every seam, most of the loop's data wait. Such a shard is now
cached in memory automatically (decoded), which changes the cost, not the contract:
shards stay disjoint and covering, every epoch is reshuffled, and the order is a pure
function of (seed, epoch) whether or not the cache was already filled.
"""
import os
import shutil

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import convert, pipeline, sharding  # noqa: E402

N_TRAIN, BATCH = 103, 5


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """fmt -> a directory of 103 training examples whose pixels hold their id."""
    root = tmp_path_factory.mktemp("ids")
    ids = np.arange(N_TRAIN + 21, dtype=np.float32)
    x, y = np.repeat(ids, 4).reshape(-1, 2, 2, 1), (ids % 3).astype(np.int64)
    np.savez(root / "ids.npz", x_train=x[:N_TRAIN], y_train=y[:N_TRAIN], x_test=x[N_TRAIN:],
             y_test=y[N_TRAIN:])
    out = {}
    for fmt, shards in (("tfrecord", 4), ("lmdb", 1)):
        out[fmt] = root / fmt
        convert.convert(convert.ConvertOptions(str(root / "ids.npz"), str(out[fmt]), fmt,
                                               num_shards=shards, progress=False))
    return out


def _load(path, fmt="tfrecord", **kw):
    return data.load(cfg.DataConfig(dataset=fmt, data_dir=str(path), **kw))


def _ids(source, world, rank, epoch, seed=7):
    ds = source.train_dataset(sharding.ShardInfo(rank, world), BATCH, seed, epoch)
    return [np.asarray(x)[:, 0, 0, 0].astype(int).tolist() for x, _ in ds]


def _remove_records(path):
    for name in os.listdir(path):
        if name.endswith(".tfrecord") or name.endswith(".lmdb"):
            target = path / name
            shutil.rmtree(target) if target.is_dir() else os.remove(target)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_small_shard_is_read_from_its_files_only_in_the_first_epoch(converted, tmp_path,
                                                                       fmt):
    copy = shutil.copytree(converted[fmt], tmp_path / fmt)
    source = _load(copy, fmt)  # no --cache: the default
    first = [_ids(source, 2, r, epoch=0) for r in range(2)]
    _remove_records(copy)  # later epochs must not need the files
    second = [_ids(source, 2, r, epoch=1) for r in range(2)]
    for per_rank in (first, second):
        used = [i for batches in per_rank for b in batches for i in b]
        assert [len(b) for b in per_rank] == [N_TRAIN // (2 * BATCH)] * 2
        assert len(used) == len(set(used)) == (N_TRAIN // (2 * BATCH)) * 2 * BATCH
    assert first != second  # reshuffled although served from memory


def test_the_order_is_the_same_with_the_cache_filled_or_not(converted):
    """Resume builds epoch e on a fresh source: it must see the batches a run that
    went through epochs 0..e-1 (cache filled) trained on."""
    warm = _load(converted["tfrecord"])
    for epoch in range(3):
        seen = [_ids(warm, 3, r, epoch) for r in range(3)]
    cold = _load(converted["tfrecord"])
    assert [_ids(cold, 3, r, epoch=2) for r in range(3)] == seen
    assert _ids(cold, 3, 0, epoch=2, seed=8) != seen[0]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_streaming_shards_stay_disjoint_and_covering(converted, monkeypatch, world):
    """The path for shards too large to cache (budget 0 here) keeps the contract too."""
    monkeypatch.setattr(pipeline, "AUTO_CACHE_BYTES", 0)
    source = _load(converted["tfrecord"])
    per_rank = [_ids(source, world, r, epoch=1) for r in range(world)]
    steps = N_TRAIN // (BATCH * world)
    used = [i for batches in per_rank for b in batches for i in b]
    assert [len(b) for b in per_rank] == [steps] * world
    assert len(used) == len(set(used)) == steps * BATCH * world


def test_only_shards_that_fit_the_shuffle_buffer_and_the_budget_are_cached():
    spec = (tf.TensorSpec([2, 2, 1], tf.float32), tf.TensorSpec([], tf.int32))  # 20 bytes
    fits = pipeline.Epoch(steps=10, batch_size=5, records=103, seed=0)
    assert pipeline.auto_cache(fits, spec) == "memory"
    # Larger than the shuffle buffer: a cache would read files in a fixed order, where
    # streaming permutes them every epoch; it keeps streaming.
    assert pipeline.auto_cache(pipeline.Epoch(10, 5, 103, 0, shuffle_buffer=50), spec) == ""
    assert pipeline.auto_cache(pipeline.Epoch(10, 5, 5000, 0), spec) == ""
    big = (tf.TensorSpec([224, 224, 3], tf.uint8), tf.TensorSpec([], tf.int32))
    assert pipeline.auto_cache(pipeline.Epoch(10, 5, 1000, 0), big) == ""  # 150 MB
    unknown = (tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32))
    assert pipeline.auto_cache(fits, unknown) == ""
    # An explicit --cache is the user's choice either way.
    explicit = pipeline.Epoch(10, 5, 5000, 0, cache="/fast/prefix")
    assert pipeline.auto_cache(explicit, spec) == "/fast/prefix"
