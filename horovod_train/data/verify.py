"""Load-time record checks shared by the TFRecord and LMDB sources.

Every rank scans every file the same way, so the readable-record counts (and hence
num_train_examples and the step count) agree on all ranks even when --skip_corrupt
drops records. A failure here is a UsageError naming the file and the record index,
before any rank has started a collective.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from horovod_train.data import errors

BATCH = 4096  # records per batch when scanning
BAD_VALUES = "a label, token or image size that does not match dataset.json"


@dataclasses.dataclass(frozen=True, eq=False)
class Scan:
    good: np.ndarray  # indices (in file order) of the records that read, parse and check
    error: str | None = None  # the first kind of failure, shortened; None when all were good

    @property
    def first_bad(self) -> int | None:
        if self.error is None:
            return None
        gaps = np.nonzero(self.good != np.arange(len(self.good)))[0]
        return int(gaps[0]) if len(gaps) else len(self.good)


def short_error(err: Exception) -> str:
    """TF's message on one line, without its prefixes and node lists."""
    return errors.short_message(getattr(err, "message", None) or str(err))


def _collect(ds, batched: bool = False) -> tuple[np.ndarray, np.ndarray]:
    parts = [(i.numpy(), s.numpy()) for i, s in (ds if batched else ds.batch(BATCH))]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def scan(records: tf.data.Dataset, check) -> Scan:
    """Runs check(record) on every record, in order. On an error, a second pass that
    skips failures finds which indices are readable. A reader stops a TFRecord file at
    its first unreadable record, so everything after it counts as unreadable too."""
    ds = records.enumerate().map(lambda i, r: (i, check(r)), num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True)
    error = None
    try:
        idx, status = _collect(ds)
    except (tf.errors.OpError, ValueError) as err:
        error = short_error(err)
        idx, status = _collect(ds.ignore_errors())
    if error is None and (status < 0).any():
        error = BAD_VALUES
    return Scan(idx[status >= 0], error)


def scan_files(paths, read_file, check, check_batch=None) -> list[Scan]:
    """scan() for each file, in one pipeline while every file is clean (the usual case:
    building a pipeline per file would cost more than reading small files). The check
    runs in one parallel map after the files are joined: inside flat_map it ran on one
    core, and a map per file cost ~0.05 ms a file more (18,000 JPEG records in 64
    files: 1.6-2.6 s -> 1.0 s on 2 cores; 10,000 small files: 1.7-2.0 -> 1.4 s).
    check_batch (decode.batch_checker), when given, checks BATCH records at a time."""
    if not paths:
        return []
    files = tf.data.Dataset.from_tensor_slices(tf.constant(list(paths), tf.string)).enumerate()
    ds = files.flat_map(lambda f, path: tf.data.Dataset.zip(
        (tf.data.Dataset.from_tensors(f).repeat(), read_file(path))))
    if check_batch is None:
        ds = ds.map(lambda f, r: (f, check(r)), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=True).batch(BATCH)
    else:
        ds = ds.batch(BATCH).map(lambda f, r: (f, check_batch(r)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    try:
        f, status = _collect(ds, batched=True)
    except (tf.errors.OpError, ValueError):
        status = None
    if status is None or (status < 0).any():
        return [scan(read_file(path), check) for path in paths]
    return [Scan(np.arange(n)) for n in np.bincount(f, minlength=len(paths))]
