"""Writing records: tf.train.Example serialization, TFRecord shards, LMDB, progress bar.

Used by the converter (and by tests and the benchmark to build small datasets).
TensorFlow is imported only where a record is built or written, so the converter's
bad-input errors come back without TensorFlow's start-up time.
"""
import os
import sys
import time

import lmdb

from horovod_train import fs
from horovod_train.data import schema as schema_lib

LMDB_KEY_DIGITS = 10  # zero-padded ordinals sort in record order
REDRAW_S = 0.2  # the progress bar on a terminal
LINE_EVERY_S = 30.0  # progress lines anywhere else (a log file)


def lmdb_key(index: int) -> bytes:
    return b"%0*d" % (LMDB_KEY_DIGITS, index)


def _serialize(feature: dict) -> bytes:
    import tensorflow as tf
    train = tf.train
    built = {}
    for name, value in feature.items():
        if isinstance(value, bytes):
            built[name] = train.Feature(bytes_list=train.BytesList(value=[value]))
        else:
            built[name] = train.Feature(int64_list=train.Int64List(value=[int(v) for v in value]))
    return train.Example(features=train.Features(feature=built)).SerializeToString()


def image_example(image: bytes, label: int) -> bytes:
    """image: raw tensor bytes or an encoded PNG/JPEG, as the schema says."""
    return _serialize({"image": image, "label": [label]})


def tokens_example(tokens, label: int | None = None) -> bytes:
    feature = {"tokens": tokens}
    if label is not None:
        feature["label"] = [label]
    return _serialize(feature)


class Progress:
    """Progress on stderr. On a terminal, one bar redrawn in place at most 5 times a
    second. Elsewhere (a CI log, Slurm's output file, a pipe) a full line at the first
    record, then every LINE_EVERY_S, and at the end: a log gets a few readable lines
    instead of one line of thousands of carriage-return redraws."""

    def __init__(self, total: int, label: str, stream=None, width: int = 30):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.done, self.start, self.drawn = 0, time.perf_counter(), float("-inf")
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty())

    def update(self, n: int = 1):
        self.done += n
        now = time.perf_counter()
        finished = self.done >= self.total
        if not finished and now - self.drawn < (REDRAW_S if self.interactive else LINE_EVERY_S):
            return
        self.drawn = now
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(frac * self.width)
        rate = self.done / max(now - self.start, 1e-9)
        text = (f"{self.label} [{bar:<{self.width}}] {100 * frac:3.0f}% "
                f"{self.done}/{self.total} {rate:.0f}/s")
        if self.interactive:
            text = "\r" + text + ("\n" if finished else "")
        else:
            text += "\n"
        self.stream.write(text)
        self.stream.flush()


def shard_bounds(count: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous, balanced record ranges: shard sizes differ by at most one, which
    lets file-level sharding give every worker a full epoch whenever the shard
    count is a multiple of the worker count."""
    base, extra = divmod(count, num_shards)
    bounds, lo = [], 0
    for i in range(num_shards):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def write_tfrecord(out_dir: str, split: str, records, count: int, num_shards: int,
                   progress: Progress | None = None) -> schema_lib.Split:
    """Writes `count` serialized records from the iterator `records` into num_shards files."""
    import tensorflow as tf
    num_shards = max(1, min(num_shards, count))
    names, counts, sizes = [], [], []
    it = iter(records)
    for i, (lo, hi) in enumerate(shard_bounds(count, num_shards)):
        name = f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord"
        path = os.path.join(out_dir, name)
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(hi - lo):
                writer.write(next(it))
                if progress:
                    progress.update()
        names.append(name)
        counts.append(hi - lo)
        sizes.append(fs.stat(path).size)
    return schema_lib.Split(tuple(names), tuple(counts), tuple(sizes))


def _put_all(env, items) -> None:
    with env.begin(write=True) as txn:
        for key, value in items:
            txn.put(key, value)


def write_lmdb(out_dir: str, split: str, records, count: int,
               progress: Progress | None = None, commit_every: int = 1000) -> schema_lib.Split:
    """One LMDB environment `<split>.lmdb`; record i under key lmdb_key(i). `out_dir` is
    local (options.check_lmdb_local): LMDB memory-maps its file."""
    name = f"{split}.lmdb"
    env = lmdb.open(fs.local_path(os.path.join(out_dir, name)), map_size=64 << 20, subdir=True)
    pending, index = [], 0
    try:
        for value in records:
            pending.append((lmdb_key(index), value))
            index += 1
            if len(pending) >= commit_every or index == count:
                _commit(env, pending)
                if progress:
                    progress.update(len(pending))
                pending = []
        _commit(env, pending)
    finally:
        env.close()
    return schema_lib.Split((name,), (index,))


def _commit(env, pending) -> None:
    """Commits, doubling the memory map whenever it is full (the final size is unknown)."""
    while pending:
        try:
            _put_all(env, pending)
            return
        except lmdb.MapFullError:
            env.set_mapsize(env.info()["map_size"] * 2)


def write_metadata(out_dir: str, meta: schema_lib.Metadata) -> str:
    """Written last, after every shard, and aside then renamed (fs.write_atomic): a
    directory holding dataset.json is whole wherever the filesystem's rename is not."""
    path = os.path.join(out_dir, schema_lib.METADATA)
    fs.write_atomic(path, schema_lib.to_json(meta).encode("utf-8"))
    return path
