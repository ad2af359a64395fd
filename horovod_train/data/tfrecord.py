"""TFRecord directories: dataset.json plus shards such as train-00000-of-00008.tfrecord.

Sharding (sharding.plan_train_read): with at least as many files as workers, each
worker opens only its own files (dealt by record count) - file-level; with fewer
files, or when the deal would leave a worker short of a full epoch of steps, every
worker reads every file and keeps every count-th record - record-level. Files are
read with a parallel, order-preserving interleave.
"""
import dataclasses
import os
import struct
import zlib

import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import fs
from horovod_train.data import decode, pipeline, sharding, verdicts, verify
from horovod_train.data import schema as schema_lib
from horovod_train.errors import usage_error

CYCLE_LENGTH = 16  # files read concurrently per worker
READ_BUFFER = 1 << 20  # bytes; large sequential reads suit network filesystems
SKIP_FIX = "restore or re-convert the file, or pass --skip_corrupt to skip (and count) " \
           "unreadable records"


@dataclasses.dataclass(frozen=True)
class FileSet:
    paths: tuple
    counts: tuple  # records each file yields (readable ones only, under --skip_corrupt)


@dataclasses.dataclass(frozen=True, eq=False)
class TFRecordSource(schema_lib.SchemaShape):
    schema: schema_lib.Schema
    train: FileSet
    eval: FileSet
    config: object  # the DataConfig
    skipped: int = 0  # unreadable records skipped under --skip_corrupt (both splits)
    _memo: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def num_train_examples(self) -> int:
        return sum(self.train.counts)

    def _file(self, path):
        ds = _reader(path)
        if not self.config.skip_corrupt:
            return ds
        # The same rule as the load-time count: a reader error ends the file, a record
        # that does not decode is dropped alone. The filter keeps the check alive.
        check = decode.checker(self.schema)
        ds = ds.map(lambda r: (r, check(r))).ignore_errors()
        return ds.filter(lambda r, n: n >= 0).map(lambda r, n: r)

    def _records(self, files: FileSet, order, threads: int, trained=None,
                 ids: bool = False) -> tf.data.Dataset:
        """The records of files `order` (indices into files), interleaved; without the
        ones `trained` marks (a mask over record ids: file i's j-th readable record is
        id starts[i] + j); `ids`: their ids instead, in the same order (nothing read)."""
        starts = tf.constant(np.cumsum([0, *files.counts[:-1]]), tf.int64)
        counts = tf.constant(files.counts, tf.int64)
        paths = tf.constant(files.paths, tf.string)
        mask = None if trained is None else tf.constant(trained)

        def one(i):
            if ids:
                ds = tf.data.Dataset.range(starts[i], starts[i] + counts[i])
                return ds if mask is None else ds.filter(lambda r: ~mask[r])
            ds = self._file(paths[i])
            if mask is None:
                return ds
            return ds.enumerate(starts[i]).filter(lambda r, _: ~mask[r]).map(lambda _, rec: rec)
        return tf.data.Dataset.from_tensor_slices(tf.constant(list(order), tf.int64)).interleave(
            one, cycle_length=max(1, min(len(order), CYCLE_LENGTH)), block_length=1,
            num_parallel_calls=threads or tf.data.AUTOTUNE, deterministic=True)

    @property
    def record_id_count(self) -> int:
        """Training record ids are 0 .. this - 1 (layouts.py)."""
        return self.num_train_examples

    def _decode(self, record):
        return decode.decoder(self.schema)(decode.parser(self.schema)(record))

    @property
    def _decode_batch(self):
        return decode.batch_decoder(self.schema)

    def _cache_key(self, split: str, plan, shard) -> str:
        digest = zlib.crc32(repr((self.train, self.eval)).encode()) & 0xFFFFFFFF
        return f"tfrecord-{split}-{digest:08x}-{plan.mode}-{shard.index}of{shard.count}"

    def _epoch(self, shard, batch_size, seed, epoch, threads, trained):
        """(Epoch, records(shuffled, ids=False)) of this worker's training epoch; with
        `trained`, of the epoch's records it does not mark (layouts.py)."""
        counts = self.train.counts
        if trained is not None:
            counts = sharding.untrained_counts(counts, trained)
        plan = sharding.plan_train_read(counts, shard, batch_size)
        ep = pipeline.make_epoch(self.config, sum(counts), shard, batch_size, seed, epoch,
                                 threads, plan.records, self._cache_key("train", plan, shard),
                                 cacheable=trained is None)

        def records(shuffled, ids=False):
            order = list(plan.files)
            if shuffled:
                # Same permutation on every rank, so record-level shards stay disjoint.
                rng = np.random.default_rng(sharding.epoch_seed(seed, epoch))
                order = [order[i] for i in rng.permutation(len(order))]
            ds = self._records(self.train, order, threads, trained, ids)
            return ds.shard(shard.count, shard.index) if plan.mode == "record" else ds
        return ep, records

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0, trained=None):
        ep, records = self._epoch(shard, batch_size, seed, epoch, threads, trained)
        return pipeline.train_batches(records, self._decode, ep, self._memo,
                                       decode_batch=self._decode_batch)

    def record_ids(self, shard, batch_size, seed, epoch, trained=None):
        """The ids of train_dataset's records, in the order it trains them."""
        ep, records = self._epoch(shard, batch_size, seed, epoch, 0, trained)
        return pipeline.record_order(lambda shuffled: records(shuffled, ids=True), records,
                                     self._decode, ep, decode_batch=self._decode_batch)

    def eval_dataset(self, shard, batch_size):
        plan = sharding.plan_eval_read(self.eval.counts, shard)
        ds = self._records(self.eval, list(plan.files), 0)
        if plan.mode == "record":
            ds = ds.shard(shard.count, shard.index)
        return pipeline.eval_batches(ds, self._decode, batch_size, self._decode_batch)


def frame_count(path: str) -> int:
    """Records whose length headers can be followed (checksums unchecked): how many
    records a file holds when its contents cannot be trusted past a corruption."""
    count, pos, size = 0, 0, fs.stat(path).size
    with fs.open_file(path, "rb") as f:
        while pos + 12 <= size:
            f.seek(pos)
            (length,) = struct.unpack("<Q", f.read(8))
            pos, count = pos + 16 + length, count + 1
    return count


def _reader(path):
    return tf.data.TFRecordDataset(path, buffer_size=READ_BUFFER)


def _judge(path: str, result: verdicts.Verdict, skip: bool,
           expected: int | None) -> tuple[int, int]:
    """(readable records, skipped records) of one checked file; UsageError unless `skip`."""
    if result.error is None:
        return result.good, 0
    total = expected if expected is not None else max(frame_count(path), result.first_bad + 1)
    if not skip:
        raise usage_error(f"TFRecord file {path}",
                          f"an unreadable record at index {result.first_bad} ({result.error})",
                          f"{total} readable records", SKIP_FIX)
    skipped = max(total - result.good, 1)
    logging.warning("data | --skip_corrupt: %s: skipping %d records from index %d (%s)",
                    path, skipped, result.first_bad, result.error)
    return result.good, skipped


def _check_sizes(paths, split: schema_lib.Split) -> None:
    for path, size in zip(paths, split.sizes or ()):
        actual = fs.stat(path).size
        if actual != size:
            raise usage_error(f"TFRecord file {path}", f"{actual} bytes",
                              f"{size} bytes as recorded in {schema_lib.METADATA} "
                              "(the file was truncated or changed)", SKIP_FIX)


def _file_set(data_dir, meta, name: str, flag: str, config, peers=None,
              memory=None) -> tuple[FileSet, int]:
    where = os.path.join(data_dir, schema_lib.METADATA)
    split = schema_lib.split_of(meta, name, where, flag)
    paths = tuple(os.path.join(data_dir, f) for f in split.files)
    for path in paths:
        if not fs.isfile(path):
            raise usage_error(f"TFRecord file {path}", "a missing file",
                              f"every file listed in {where}", "restore it or re-convert")
    scan_all = config.verify_data or config.skip_corrupt or split.records is None
    if not scan_all:
        _check_sizes(paths, split)
        return FileSet(paths, split.records), 0
    expected = split.records or (None,) * len(paths)
    check = decode.checker(meta.schema)
    batch_check = decode.batch_checker(meta.schema)
    checked = verdicts.check_files(
        paths, lambda mine: verify.scan_files(mine, _reader, check, batch_check), peers, memory)
    counted = [_judge(p, r, config.skip_corrupt, e) for p, r, e in zip(paths, checked, expected)]
    return FileSet(paths, tuple(c for c, _ in counted)), sum(s for _, s in counted)


def load(data_config, *, peers=None) -> TFRecordSource:
    """The TFRecord directory's source; its files checked once across `peers` (a
    Communicator; None: this process alone) and remembered (verdicts.py)."""
    meta = schema_lib.read(data_config.data_dir, "tfrecord")
    memory = verdicts.Memory(data_config.data_dir, schema_lib.digest(data_config.data_dir))
    train, skipped_train = _file_set(data_config.data_dir, meta, data_config.train_split,
                                     "--train_split", data_config, peers, memory)
    evaluation, skipped_eval = _file_set(data_config.data_dir, meta, data_config.eval_split,
                                         "--eval_split", data_config, peers, memory)
    if sum(train.counts) == 0:
        raise usage_error("--data_dir", data_config.data_dir,
                          f"readable records in split {data_config.train_split!r}",
                          "re-convert the data or pick another --train_split")
    return TFRecordSource(meta.schema, train, evaluation, data_config,
                          skipped=skipped_train + skipped_eval)
