"""LMDB: dataset.json plus one memory-mapped environment per split (<split>.lmdb/).

Record i is the tf.train.Example stored under the key lmdb_key(i) (the layout of
TFRecord records, so both decode identically). Random access is cheap, so each worker
reads its own contiguous key range, in a fresh seeded permutation every epoch: a full
shuffle with no buffer. The key range comes from the record count, which every rank
reads from the environment itself. LMDB is local only: DataConfig refuses a URL
--data_dir (options.check_lmdb_local), since a memory map needs a local file.
"""
import dataclasses
import os
import zlib

import lmdb
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import fs
from horovod_train.data import decode, pipeline, sharding, verify, writers
from horovod_train.data import schema as schema_lib
from horovod_train.errors import usage_error

CHUNK = 256  # keys per read call: amortises the Python call, keeps the map parallel
_ENVS = {}  # path -> environment: LMDB allows one open environment per file per process


def _env(path: str):
    if path not in _ENVS:
        try:
            env = lmdb.open(fs.local_path(path), readonly=True, lock=False, readahead=False,
                            subdir=True, max_readers=512)
        except lmdb.Error as err:
            raise usage_error(f"LMDB environment {path}", f"an unreadable database ({err})",
                              "an LMDB written by the converter",
                              "restore or re-convert it (python -m horovod_train.data convert)")
        _check_size(path, env)
        _ENVS[path] = env
    return _ENVS[path]


def _check_size(path: str, env) -> None:
    """Refuses a data.mdb shorter than its meta page says. LMDB memory-maps the file and
    trusts the meta page: touching a page past the end of a truncated file is SIGBUS,
    which kills the process with no Python error. info()/stat() read only the meta page."""
    last_page, page_size = env.info()["last_pgno"], env.stat()["psize"]
    needed = (last_page + 1) * page_size
    file = os.path.join(path, "data.mdb")
    actual = fs.stat(file).size
    if actual < needed:
        env.close()
        raise usage_error(f"LMDB file {file}", f"{actual} bytes",
                          f"at least {needed} bytes (pages 0..{last_page} of {page_size} bytes, "
                          "as its meta page records: the file was truncated)",
                          "restore it or re-convert (python -m horovod_train.data convert)")


def _read_chunk(path: str):
    def read(ids):
        try:
            with _env(path).begin(buffers=False) as txn:
                # A missing value decodes as an empty record, which fails loudly in parse.
                values = [txn.get(writers.lmdb_key(int(i))) or b"" for i in ids.numpy()]
        except lmdb.Error as err:
            # TF reports only the message: put the environment in it, so that
            # errors.describe_data_error can name it.
            raise ValueError(f"LMDB environment {path}: {type(err).__name__}: {err}") from None
        return np.array(values, dtype=object)  # a list would mean several outputs
    return lambda ids: tf.ensure_shape(tf.py_function(read, [ids], tf.string), [None])


@dataclasses.dataclass(frozen=True, eq=False)
class KeySet:
    path: str  # the environment directory
    ids: np.ndarray  # the record indices read (all of them unless --skip_corrupt dropped some)


@dataclasses.dataclass(frozen=True, eq=False)
class LmdbSource(schema_lib.SchemaShape):
    schema: schema_lib.Schema
    train: KeySet
    eval: KeySet
    config: object  # the DataConfig
    skipped: int = 0
    _memo: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def num_train_examples(self) -> int:
        return len(self.train.ids)

    def _decode(self, record):
        return decode.decoder(self.schema)(decode.parser(self.schema)(record))

    @property
    def _decode_batch(self):
        return decode.batch_decoder(self.schema)

    def _records(self, keys: KeySet, ids: np.ndarray, threads: int) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(ids.astype(np.int64)).batch(CHUNK)
        ds = ds.map(_read_chunk(keys.path), num_parallel_calls=threads or tf.data.AUTOTUNE)
        return ds.unbatch()

    @property
    def record_id_count(self) -> int:
        """Training record ids (the keys' indices) are below this (layouts.py)."""
        return int(self.train.ids.max()) + 1 if len(self.train.ids) else 0

    def _epoch(self, shard, batch_size, seed, epoch, threads, trained):
        """(Epoch, this worker's keys in the epoch's order) of its training epoch; with
        `trained`, of the epoch's records it does not mark (layouts.py)."""
        ids = self.train.ids if trained is None else self.train.ids[~trained[self.train.ids]]
        lo, hi = sharding.record_range(len(ids), shard)
        digest = zlib.crc32(f"{self.train.path}:{len(self.train.ids)}".encode()) & 0xFFFFFFFF
        key = f"lmdb-train-{digest:08x}-{shard.index}of{shard.count}"
        ep = pipeline.make_epoch(self.config, len(ids), shard, batch_size, seed, epoch, threads,
                                 hi - lo, key, cacheable=trained is None)

        def keys(shuffled):
            return np.random.default_rng(ep.seed).permutation(ids[lo:hi]) if shuffled \
                else ids[lo:hi]
        return ep, keys

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0, trained=None):
        ep, keys = self._epoch(shard, batch_size, seed, epoch, threads, trained)
        return pipeline.train_batches(lambda shuffled: self._records(
            self.train, keys(shuffled), threads), self._decode, ep, self._memo,
            pre_shuffled=True, decode_batch=self._decode_batch)

    def record_ids(self, shard, batch_size, seed, epoch, trained=None):
        """The ids of train_dataset's records, in the order it trains them."""
        ep, keys = self._epoch(shard, batch_size, seed, epoch, 0, trained)
        return pipeline.record_order(
            lambda shuffled: tf.data.Dataset.from_tensor_slices(keys(shuffled).astype(np.int64)),
            lambda shuffled: self._records(self.train, keys(shuffled), 0), self._decode, ep,
            pre_shuffled=True, decode_batch=self._decode_batch)

    def eval_dataset(self, shard, batch_size):
        lo, hi = sharding.record_range(len(self.eval.ids), shard)
        return pipeline.eval_batches(self._records(self.eval, self.eval.ids[lo:hi], 0),
                                     self._decode, batch_size, self._decode_batch)


def _scan_values(path: str, count: int, schema, skip: bool) -> tuple[np.ndarray, int]:
    """Checks every value in key order; returns (readable ids, skipped count)."""
    good, skipped, check = [], 0, decode.checker(schema)
    for start in range(0, count, verify.BATCH):
        ids = np.arange(start, min(start + verify.BATCH, count))
        try:
            with _env(path).begin(buffers=False) as txn:
                values = [txn.get(writers.lmdb_key(int(i))) for i in ids]
        except lmdb.Error as err:  # a damaged page: nothing after it can be trusted
            raise usage_error(f"LMDB environment {path}", f"a read failure near record {start} "
                              f"({err})", "an intact database", "restore or re-convert it")
        present = [v is not None for v in values]
        result = verify.scan(tf.data.Dataset.from_tensor_slices(
            [v if v is not None else b"" for v in values]), check)
        ok = np.zeros(len(ids), bool)
        ok[result.good] = True
        ok &= present
        if not ok.all():
            bad = int(ids[np.argmin(ok)])
            reason = "missing key" if not present[bad - start] else result.error
            if not skip:
                raise usage_error(f"LMDB environment {path}", f"an unreadable entry at record "
                                  f"index {bad} (key {writers.lmdb_key(bad).decode()}: {reason})",
                                  f"{count} readable records",
                                  "restore or re-convert it, or pass --skip_corrupt to skip "
                                  "(and count) unreadable records")
            logging.warning("data | --skip_corrupt: %s: skipping %d records, first index %d "
                            "(%s)", path, int((~ok).sum()), bad, reason)
            skipped += int((~ok).sum())
        good.append(ids[ok])
    return np.concatenate(good) if good else np.zeros(0, np.int64), skipped


def _key_set(data_dir, meta, name: str, flag: str, config) -> tuple[KeySet, int]:
    where = os.path.join(data_dir, schema_lib.METADATA)
    split = schema_lib.split_of(meta, name, where, flag)
    path = os.path.join(data_dir, split.files[0])
    if not fs.isfile(os.path.join(path, "data.mdb")):
        raise usage_error(f"LMDB environment {path}", "a missing environment",
                          f"a directory holding data.mdb, as listed in {where}",
                          "restore it or re-convert")
    count = _env(path).stat()["entries"]
    if split.records and split.records[0] != count:
        raise usage_error(f"LMDB environment {path}", f"{count} entries",
                          f"{split.records[0]} as recorded in {where}", "restore or re-convert it")
    if config.verify_data or config.skip_corrupt:
        ids, skipped = _scan_values(path, count, meta.schema, config.skip_corrupt)
        return KeySet(path, ids), skipped
    return KeySet(path, np.arange(count)), 0


def load(data_config, *, peers=None) -> LmdbSource:
    del peers  # one environment: verified by each rank (verdicts.py splits files)
    meta = schema_lib.read(data_config.data_dir, "lmdb")
    train, skipped_train = _key_set(data_config.data_dir, meta, data_config.train_split,
                                    "--train_split", data_config)
    evaluation, skipped_eval = _key_set(data_config.data_dir, meta, data_config.eval_split,
                                        "--eval_split", data_config)
    if len(train.ids) == 0:
        raise usage_error("--data_dir", data_config.data_dir,
                          f"readable records in split {data_config.train_split!r}",
                          "re-convert the data or pick another --train_split")
    return LmdbSource(meta.schema, train, evaluation, data_config,
                      skipped=skipped_train + skipped_eval)
