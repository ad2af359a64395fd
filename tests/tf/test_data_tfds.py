"""TFDS source on a dataset built locally from arrays (nothing can be downloaded).

The same arrays also go through the converter, so the test can check that TFDS,
TFRecord and LMDB sources yield the same examples.
"""
import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import convert, sharding  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

N_TRAIN, N_TEST, BATCH = 61, 13, 4


def _arrays():
    ids = np.arange(N_TRAIN + N_TEST, dtype=np.float32)
    x = np.repeat(ids, 4).reshape(-1, 2, 2, 1)
    y = (ids % 3).astype(np.int64)
    return {"train": (x[:N_TRAIN], y[:N_TRAIN]), "test": (x[N_TRAIN:], y[N_TRAIN:])}


class HtIdsDataset(tfds.core.GeneratorBasedBuilder):
    """Tiny supervised set whose pixels carry the example id."""
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Tensor(shape=(2, 2, 1), dtype=np.float32),
                "label": tfds.features.ClassLabel(num_classes=3)}),
            supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        del dl_manager  # everything is local
        return {name: self._generate_examples(name) for name in ("train", "test")}

    def _generate_examples(self, split):
        x, y = _arrays()[split]
        for i in range(len(x)):
            yield i, {"image": x[i], "label": int(y[i])}


@pytest.fixture(scope="module")
def tfds_dirs(tmp_path_factory):
    """data_dir -> prepared with 4 files per split, and with 1 file per split."""
    out = {}
    for shards in (4, 1):
        data_dir = str(tmp_path_factory.mktemp(f"tfds{shards}"))
        HtIdsDataset(data_dir=data_dir).download_and_prepare(
            download_config=tfds.download.DownloadConfig(num_shards=shards))
        out[shards] = data_dir
    return out


def _source(data_dir, **kw):
    return data.load(cfg.DataConfig(dataset="tfds", tfds_name="ht_ids_dataset",
                                    data_dir=data_dir, **kw))


def _ids(ds):
    return [int(v) for x, _ in ds for v in np.asarray(x)[:, 0, 0, 0]]


@pytest.mark.parametrize("shards", [4, 1])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_tfds_shards_disjoint_cover_and_equal_steps(tfds_dirs, shards, world):
    source = _source(tfds_dirs[shards])
    assert source.num_train_examples == N_TRAIN and source.num_classes == 3
    steps = N_TRAIN // (BATCH * world)
    per_rank = [list(source.train_dataset(sharding.ShardInfo(r, world), BATCH, 5, 0))
                for r in range(world)]
    assert [len(p) for p in per_rank] == [steps] * world
    used = [i for p in per_rank for i in _ids(p)]
    assert len(used) == len(set(used)) == steps * BATCH * world
    assert N_TRAIN - len(used) == N_TRAIN % (BATCH * world)
    seen = [i for r in range(world) for i in _ids(source.eval_dataset(sharding.ShardInfo(r, world),
                                                                       5))]
    assert sorted(seen) == list(range(N_TRAIN, N_TRAIN + N_TEST))


def test_tfds_same_seed_same_order(tfds_dirs):
    source = _source(tfds_dirs[4])

    def order(seed, epoch):
        return _ids(source.train_dataset(sharding.ShardInfo(1, 2), BATCH, seed, epoch))
    assert order(3, 0) == order(3, 0)
    assert order(3, 0) != order(3, 1)


def test_tfds_split_slicing_partitions_the_split(tfds_dirs):
    # TFDS stores examples in a hashed order, so a slice is some 40, not ids 0..39.
    head = _source(tfds_dirs[4], train_split="train[:40]", eval_split="train[:40]")
    tail = _source(tfds_dirs[4], train_split="train[40:]", eval_split="train[40:]")
    assert head.num_train_examples == 40 and tail.num_train_examples == N_TRAIN - 40
    world = 3
    parts = [_ids(s.eval_dataset(sharding.ShardInfo(r, world), 8))
             for s in (head, tail) for r in range(world)]
    assert sorted(i for p in parts for i in p) == list(range(N_TRAIN))
    steps = 40 // (BATCH * world)
    assert [len(list(head.train_dataset(sharding.ShardInfo(r, world), BATCH, 0, 0)))
            for r in range(world)] == [steps] * world


def test_tfds_tfrecord_and_lmdb_yield_the_same_examples(tfds_dirs, tmp_path):
    arrays = _arrays()
    np.savez(tmp_path / "a.npz", x_train=arrays["train"][0], y_train=arrays["train"][1],
             x_test=arrays["test"][0], y_test=arrays["test"][1])
    sources = [_source(tfds_dirs[4])]
    for fmt in ("tfrecord", "lmdb"):
        convert.convert(convert.ConvertOptions(str(tmp_path / "a.npz"), str(tmp_path / fmt), fmt,
                                               num_shards=3, progress=False))
        sources.append(data.load(cfg.DataConfig(dataset=fmt, data_dir=str(tmp_path / fmt))))

    def examples(ds):
        return sorted((tuple(np.asarray(x).ravel().tolist()), int(y), str(x.dtype))
                      for xb, yb in ds for x, y in zip(xb, yb))
    whole = sharding.ShardInfo(0, 1)
    evals = [examples(s.eval_dataset(whole, 5)) for s in sources]
    trains = [examples(s.train_dataset(whole, 1, 0, 0)) for s in sources]
    assert evals[0] == evals[1] == evals[2] and len(evals[0]) == N_TEST
    assert trains[0] == trains[1] == trains[2] and len(trains[0]) == N_TRAIN


def test_tfds_bad_name_and_split_are_usage_errors(tfds_dirs, tmp_path):
    with pytest.raises(UsageError, match="--tfds_name.*Fix:"):
        data.load(cfg.DataConfig(dataset="tfds", tfds_name="ht_no_such_set", data_dir=str(tmp_path)))
    with pytest.raises(UsageError, match="--train_split.*validation.*Fix:"):
        _source(tfds_dirs[4], train_split="validation")


def _trained_examples(source, layouts, split="train"):
    """The example ids (pixels) of the records rest.trained_mask marks for epoch 1."""
    from horovod_train.data import rest
    mask = rest.trained_mask(source, layouts, 5, 1)
    record_id = source._record_id(split)
    ds = source.builder.as_dataset(split=split, read_config=tfds.ReadConfig(add_tfds_id=True))
    example = {int(record_id(e["tfds_id"])): int(e["image"][0, 0, 0]) for e in ds}
    return sorted(example[i] for i in np.flatnonzero(mask)), mask


@pytest.mark.parametrize("shards,split,old,new", [
    (4, "train", (2, 4), (1, 8)), (1, "train", (1, 8), (3, 3)),
    (4, "train[10:]", (2, 3), (3, 2))])
def test_tfds_epoch_resumed_in_another_layout_trains_each_record_once(tfds_dirs, shards, split,
                                                                      old, new):
    """As tests/tf/test_data_sources.py's for TFRecord and LMDB: 3 steps of `old`, the rest
    under `new`, read through TFDS (file- or record-level, sliced splits too)."""
    from horovod_train.data.layouts import Layout
    source = _source(tfds_dirs[shards], train_split=split)
    first = Layout(old[0], old[1], 3 * old[0] * old[1])
    read = [i for r in range(old[0]) for i in _ids(source.train_dataset(
        sharding.ShardInfo(r, old[0]), old[1], 5, 1).take(3))]
    named, mask = _trained_examples(source, (first,), split)
    assert named == sorted(read) and len(set(read)) == first.examples
    world, batch = new
    steps = (source.num_train_examples - first.examples) // (world * batch)
    rest_ids = [_ids(source.train_dataset(sharding.ShardInfo(r, world), batch, 5, 1,
                                          trained=mask)) for r in range(world)]
    assert [len(ids) for ids in rest_ids] == [steps * batch] * world
    after = [i for ids in rest_ids for i in ids]
    assert len(set(after)) == len(after) and not set(after) & set(read)
