"""TFRecord / LMDB / synthetic sources: sharding, coverage, order, caching, formats.

Every example carries its id in its pixels, so a batch tells exactly which examples
a rank read. Drop-remainder rule checked here: per epoch the ranks together use
steps * batch * world examples, steps = N // (batch * world); the N mod (batch * world)
others are dropped (which ones changes with the epoch's shuffle), nothing is repeated.
"""
import os
import shutil

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")

from helpers import image_classes  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import convert, sharding  # noqa: E402

N_TRAIN, N_TEST, BATCH = 103, 21, 5


def _arrays():
    ids = np.arange(N_TRAIN + N_TEST, dtype=np.float32)
    ids[N_TRAIN:] += 1000  # test ids 1000..
    x = np.repeat(ids, 4).reshape(-1, 2, 2, 1)
    y = (ids % 3).astype(np.int64)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("arrays") / "ids.npz"
    x_train, y_train, x_test, y_test = _arrays()
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return str(path)


@pytest.fixture(scope="module")
def dirs(npz, tmp_path_factory):
    """fmt name -> converted directory: TFRecord with 1, 4 and 6 files, and LMDB."""
    root = tmp_path_factory.mktemp("converted")
    out = {}
    for name, fmt, shards in (("tfr1", "tfrecord", 1), ("tfr4", "tfrecord", 4),
                              ("tfr6", "tfrecord", 6), ("lmdb", "lmdb", 1)):
        out[name] = str(root / name)
        convert.convert(convert.ConvertOptions(npz, out[name], fmt, num_shards=shards,
                                               progress=False))
    return out


_LOADED = {}


def _source(dirs, name, **kw):
    """Loads (and verifies) each directory once per option set: loading scans every file."""
    key = (dirs[name], tuple(sorted(kw.items())))
    if key not in _LOADED:
        fmt = "lmdb" if name == "lmdb" else "tfrecord"
        _LOADED[key] = data.load(cfg.DataConfig(dataset=fmt, data_dir=dirs[name], **kw))
    return _LOADED[key]


def _ids(ds):
    return [np.asarray(x)[:, 0, 0, 0].astype(int).tolist() for x, _ in ds]


def _epoch(source, world, seed=7, epoch=0, batch=BATCH):
    return [_ids(source.train_dataset(sharding.ShardInfo(r, world), batch, seed, epoch))
            for r in range(world)]


@pytest.mark.parametrize("name", ["tfr1", "tfr4", "tfr6", "lmdb"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_train_shards_are_disjoint_cover_the_epoch_and_run_equal_steps(dirs, name, world):
    source = _source(dirs, name)
    assert source.num_train_examples == N_TRAIN
    steps = N_TRAIN // (BATCH * world)
    per_rank = _epoch(source, world)
    assert [len(batches) for batches in per_rank] == [steps] * world  # no rank ends early
    used = [i for batches in per_rank for b in batches for i in b]
    assert len(used) == len(set(used)) == steps * BATCH * world  # disjoint
    assert set(used) <= set(range(N_TRAIN))
    assert N_TRAIN - len(used) == N_TRAIN % (BATCH * world)  # only the remainder is dropped


@pytest.mark.parametrize("name", ["tfr1", "tfr4", "tfr6", "lmdb"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_eval_shards_cover_every_example_exactly_once(dirs, name, world):
    source = _source(dirs, name)
    seen = [i for r in range(world)
            for b in _ids(source.eval_dataset(sharding.ShardInfo(r, world), 4)) for i in b]
    assert sorted(seen) == list(range(1000 + N_TRAIN, 1000 + N_TRAIN + N_TEST))


@pytest.mark.parametrize("name", ["tfr4", "lmdb"])
def test_same_seed_same_order_and_each_epoch_reshuffles(dirs, name):
    source = _source(dirs, name)
    a, b = _epoch(source, 2, seed=3, epoch=1), _epoch(source, 2, seed=3, epoch=1)
    assert a == b
    assert a != _epoch(source, 2, seed=3, epoch=2)
    assert a != _epoch(source, 2, seed=4, epoch=1)


def test_sharding_mode_follows_the_file_count(dirs):
    counts = _source(dirs, "tfr4").train.counts
    assert sharding.plan_train_read(counts, sharding.ShardInfo(0, 4), BATCH).mode == "file"
    assert sharding.plan_train_read(counts, sharding.ShardInfo(0, 2), BATCH).mode == "file"
    # 4 files of 26/26/26/25 over 3 workers: one worker would hold 52, another 25 < 30.
    assert sharding.plan_train_read(counts, sharding.ShardInfo(0, 3), BATCH).mode == "record"
    one = _source(dirs, "tfr1").train.counts
    assert sharding.plan_train_read(one, sharding.ShardInfo(1, 2), BATCH).mode == "record"


def _examples(ds):
    return sorted((tuple(np.asarray(x).ravel().tolist()), int(y))
                  for xb, yb in ds for x, y in zip(xb, yb))


def test_tfrecord_and_lmdb_yield_the_same_examples_as_the_arrays(dirs):
    x_train, y_train, x_test, y_test = _arrays()
    want_test = sorted((tuple(x.ravel().tolist()), int(y)) for x, y in zip(x_test, y_test))
    want_train = sorted((tuple(x.ravel().tolist()), int(y)) for x, y in zip(x_train, y_train))
    for name in ("tfr4", "lmdb"):
        source = _source(dirs, name)
        assert _examples(source.eval_dataset(sharding.ShardInfo(0, 1), 7)) == want_test
        # Batch 1, one worker: an epoch is every training example exactly once.
        assert _examples(source.train_dataset(sharding.ShardInfo(0, 1), 1, 0, 0)) == want_train
        assert source.input_shape == (2, 2, 1) and source.num_classes == 3


@pytest.mark.parametrize("cache", ["memory", "file"])
def test_cache_keeps_coverage_and_serves_later_epochs(dirs, cache, tmp_path):
    copy = shutil.copytree(dirs["tfr4"], tmp_path / "data")
    prefix = "memory" if cache == "memory" else str(tmp_path / "cache")
    source = data.load(cfg.DataConfig(dataset="tfrecord", data_dir=str(copy), cache=prefix,
                                      shuffle_buffer=8))
    first = _epoch(source, 2, epoch=0)
    for name in os.listdir(copy):  # later epochs must not need the files any more
        if name.endswith(".tfrecord"):
            os.remove(copy / name)
    second = _epoch(source, 2, epoch=1)
    for per_rank in (first, second):
        used = [i for batches in per_rank for b in batches for i in b]
        assert len(used) == len(set(used)) == (N_TRAIN // (2 * BATCH)) * 2 * BATCH
    assert first != second  # reshuffled although read from the cache
    if cache == "file":
        assert any(f.startswith("cache.") and f.endswith(".index") for f in os.listdir(tmp_path))
    assert _epoch(source, 2, epoch=1) == second  # deterministic with the cache too


def test_data_threads_and_shuffle_buffer_keep_the_contract(dirs):
    source = _source(dirs, "lmdb", shuffle_buffer=16)
    batches = _ids(source.train_dataset(sharding.ShardInfo(1, 3), BATCH, 0, 0, threads=1))
    assert len(batches) == N_TRAIN // (BATCH * 3)


def test_text_becomes_shifted_token_windows(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_bytes(bytes(range(256)) * 3)
    out = str(tmp_path / "lm")
    convert.convert(convert.ConvertOptions(str(text), out, "lmdb", seq_len=16, progress=False))
    source = data.load(cfg.DataConfig(dataset="lmdb", data_dir=out))
    assert source.input_shape == (16,) and source.num_classes == 256
    x, y = next(iter(source.train_dataset(sharding.ShardInfo(0, 1), 4, 0, 0)))
    assert x.dtype == tf.int32 and x.shape == (4, 16)
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])


def test_image_folders_convert_to_decodable_png_records(tmp_path):
    image_classes(str(tmp_path / "imgs"))
    out = str(tmp_path / "tfr")
    convert.convert(convert.ConvertOptions(str(tmp_path / "imgs"), out, num_shards=2,
                                           eval_fraction=0.25, progress=False))
    source = data.load(cfg.DataConfig(dataset="tfrecord", data_dir=out))
    assert source.input_shape == (5, 4, 3) and source.num_classes == 2
    assert source.num_train_examples == 9
    x, y = next(iter(source.eval_dataset(sharding.ShardInfo(0, 1), 3)))
    assert x.dtype == tf.float32 and float(tf.reduce_max(x)) <= 1.0
    assert open(os.path.join(out, "labels.txt")).read().split() == ["cat", "dog"]


def test_synthetic_data_of_any_shape_follows_global_batch_sharding():
    source = data.load(cfg.DataConfig(dataset="synthetic", synthetic_shape=(32, 32, 3),
                                      synthetic_examples=256))
    assert source.input_shape == (32, 32, 3) and source.num_train_examples == 224
    shards = [list(source.train_dataset(sharding.ShardInfo(r, 2), 8, 1, 0)) for r in range(2)]
    assert [len(s) for s in shards] == [14, 14]
    assert shards[0][0][0].shape == (8, 32, 32, 3)
    big = data.load(cfg.DataConfig(dataset="synthetic", synthetic_shape=(224, 224, 3)))
    assert big.input_shape == (224, 224, 3) and len(big.pool) < big.num_train_examples


# ---- The rest of an epoch after a change of layout (data/layouts.py, data/rest.py) -----

def _rest(source, layouts, seed=7, epoch=1):
    """The example ids (pixels) of the records the replay marks as trained."""
    from horovod_train.data import rest
    mask = rest.trained_mask(source, layouts, seed, epoch)
    # Record ids count records in storage order (files in turn; LMDB keys), which the
    # converter shuffled: read that order to name each record's example.
    if hasattr(source.train, "paths"):
        files = [source._records(source.train, [f], 0) for f in range(len(source.train.paths))]
    else:
        files = [source._records(source.train, source.train.ids, 0)]
    example = [int(np.asarray(x)[0, 0, 0]) for ds in files for x, _ in ds.map(source._decode)]
    return sorted(example[i] for i in np.flatnonzero(mask))


# Every source, each read both ways (buffer 0: these shards are cached in memory; 8:
# streamed), across each kind of change (ranks x step batch before -> after).
@pytest.mark.parametrize("name,buffer,old,new", [
    ("tfr1", 0, (2, 5), (1, 10)), ("tfr1", 8, (2, 5), (3, 4)), ("tfr4", 0, (1, 10), (2, 5)),
    ("tfr4", 8, (2, 5), (1, 10)), ("tfr6", 0, (1, 10), (2, 5)), ("tfr6", 8, (2, 5), (3, 4)),
    ("lmdb", 0, (2, 5), (1, 10)), ("lmdb", 8, (2, 5), (3, 4))])
def test_an_epoch_resumed_in_another_layout_trains_each_record_once(dirs, name, buffer, old,
                                                                   new):
    """Ranks of layout `old` (ranks, step batch) train 3 steps of epoch 1; the replay on ids
    names exactly the records they read; ranks of `new` then read the others, equal steps
    each, and a third layout after 1 more step again only untrained ones."""
    from horovod_train.data.layouts import Layout
    source = _source(dirs, name, shuffle_buffer=buffer)
    first = Layout(old[0], old[1], 3 * old[0] * old[1])
    read = [ids for rank in _epoch(source, old[0], epoch=1, batch=old[1])
            for ids in rank[:3]]
    trained = sorted(i for ids in read for i in ids)
    assert _rest(source, (first,)) == trained and len(set(trained)) == first.examples
    from horovod_train.data import rest
    mask = rest.trained_mask(source, (first,), 7, 1)

    world, batch = new
    steps = (N_TRAIN - first.examples) // (world * batch)
    rest_ids = [_ids(source.train_dataset(sharding.ShardInfo(r, world), batch, 7, 1,
                                          trained=mask)) for r in range(world)]
    assert [len(r) for r in rest_ids] == [steps] * world
    after = [i for rank in rest_ids for ids in rank for i in ids]
    assert len(set(after)) == len(after) == steps * world * batch
    assert not set(after) & set(trained)

    second = Layout(world, batch, world * batch)  # one step of the new layout, then a third
    assert _rest(source, (first, second)) == sorted(
        trained + [i for rank in rest_ids for i in rank[0]])
    both = rest.trained_mask(source, (first, second), 7, 1)
    third = [_ids(source.train_dataset(sharding.ShardInfo(r, 2), 3, 7, 1, trained=both))
             for r in range(2)]
    later = [i for rank in third for ids in rank for i in ids]
    assert len(set(later)) == len(later) == (N_TRAIN - int(both.sum())) // 6 * 6
    assert not set(later) & set(_rest(source, (first, second)))


def test_a_replay_of_data_that_changed_is_refused(dirs):
    from horovod_train.data.layouts import Layout
    with pytest.raises(ValueError, match="expected 50 new ones: the data is not what"):
        _rest(_source(dirs, "tfr4"), (Layout(2, 25, 100), Layout(2, 25, 100)))
