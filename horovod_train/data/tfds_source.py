"""TFDS datasets, read from an already prepared --data_dir (nothing is downloaded).

Sharding follows the TFRecord rule with TFDS's own tools: file-level through
ReadConfig(input_context=...) - TFDS then gives worker i the files i, i + n, ... - when
there are at least as many files as workers and each worker's files hold a full
epoch; otherwise record-level through split slicing (tfds.even_splits), which also
works on sliced splits such as train[:90%].
"""
import dataclasses
import os
import re

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from horovod_train.data import decode, pipeline, sharding
from horovod_train.errors import usage_error
from launch.redact import redact

CYCLE_LENGTH = 16  # fixed (not AUTOTUNE) so the interleave order, hence a seed's order, is fixed
PREPARE_FIX = ("prepare it where there is network access (tfds.builder(NAME).download_and_"
               "prepare()), copy that data_dir here, and pass --data_dir=DIR")


@dataclasses.dataclass(frozen=True, eq=False)
class TfdsSource:
    builder: object  # tfds.core.DatasetBuilder
    config: object  # the DataConfig
    num_train_examples: int
    input_shape: tuple
    num_classes: int
    _memo: dict = dataclasses.field(default_factory=dict, repr=False)

    def _counts(self, split: str) -> list[int]:
        """Examples per file instruction (a sliced split may read parts of files)."""
        return [fi.take for fi in self.builder.info.splits[split].file_instructions]

    def _read(self, split: str, plan, shard, shuffle_seed, threads: int, trained=None,
              ids: bool = False) -> tf.data.Dataset:
        """This worker's (x, y) of `split` per `plan`; without the records `trained` marks
        (a mask over record ids, _record_id); `ids`: their ids instead, same order."""
        context, split_arg = None, split
        if plan.mode == "file":
            context = tf.distribute.InputContext(num_input_pipelines=shard.count,
                                                 input_pipeline_id=shard.index)
        elif trained is None:
            split_arg = tfds.even_splits(split, n=shard.count)[shard.index]
        tagged = ids or trained is not None
        read_config = tfds.ReadConfig(
            input_context=context, shuffle_seed=shuffle_seed, try_autocache=False,
            interleave_cycle_length=CYCLE_LENGTH, add_tfds_id=tagged,
            num_parallel_calls_for_interleave_files=threads or tf.data.AUTOTUNE)
        ds = self.builder.as_dataset(split=split_arg, shuffle_files=shuffle_seed is not None,
                                     read_config=read_config, as_supervised=not tagged,
                                     decoders=self._skip_images() if ids else None)
        if not tagged:
            return ds
        x_key, y_key = self.builder.info.supervised_keys
        record_id = self._record_id(split)
        ds = ds.map(lambda ex: (record_id(ex["tfds_id"]), ex[x_key], ex[y_key]))
        if trained is not None:
            mask = tf.constant(trained)
            ds = ds.filter(lambda r, x, y: ~mask[r])
            if plan.mode == "record":  # the split's other records, every count-th
                ds = ds.shard(shard.count, shard.index)
        return ds.map(lambda r, x, y: r) if ids else ds.map(lambda r, x, y: (x, y))

    def _skip_images(self):
        """Replaying ids needs no pixels: encoded images stay undecoded."""
        features = self.builder.info.features
        return {k: tfds.decode.SkipDecoding() for k in features.keys()
                if isinstance(features[k], tfds.features.Image)}

    def _record_id(self, split: str):
        """tfds_id ("<file>__<index in file>") -> the record's id: its place in the split
        (file instructions in order, from each one's skip)."""
        instructions = self.builder.info.splits[split].file_instructions
        names = [os.path.basename(fi.filename) for fi in instructions]
        if len(set(names)) != len(names):
            raise usage_error("--train_split", split, "a split that reads each file once",
                              "pick a split without overlapping slices")
        firsts = np.cumsum([0, *(fi.take for fi in instructions[:-1])])
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(names), tf.constant(firsts - [fi.skip for fi in instructions],
                                            tf.int64)), -1)

        def record_id(tfds_id):
            name = tf.strings.regex_replace(tfds_id, "__[0-9]+$", "")
            index = tf.strings.to_number(tf.strings.regex_replace(tfds_id, "^.*__", ""),
                                         tf.int64)
            return table.lookup(name) + index
        return record_id

    @property
    def record_id_count(self) -> int:
        """Training record ids are 0 .. this - 1 (layouts.py)."""
        return self.num_train_examples

    def _epoch(self, shard, batch_size, seed, epoch, threads, trained):
        """(Epoch, records(shuffled, ids=False)) of this worker's training epoch; with
        `trained`, of the epoch's records it does not mark (layouts.py)."""
        split = self.config.train_split
        counts = self._counts(split)
        if trained is not None:
            counts = sharding.untrained_counts(counts, trained)
        plan = sharding.plan_train_read(counts, shard, batch_size,
                                        dealt=sharding.round_robin(len(counts), shard.count))
        key = f"tfds-{self.builder.name}-{split}-{plan.mode}-{shard.index}of{shard.count}"
        ep = pipeline.make_epoch(self.config, sum(counts), shard, batch_size, seed, epoch,
                                 threads, plan.records, re.sub(r"[^\w.-]", "_", key),
                                 cacheable=trained is None)

        def records(shuffled, ids=False):
            file_seed = sharding.epoch_seed(seed, epoch) if shuffled else None
            return self._read(split, plan, shard, file_seed, threads, trained, ids)
        return ep, records

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0, trained=None):
        ep, records = self._epoch(shard, batch_size, seed, epoch, threads, trained)
        return pipeline.train_batches(records, decode.standardize, ep, self._memo,
                                       decode_batch=decode.standardize)

    def record_ids(self, shard, batch_size, seed, epoch, trained=None):
        """The ids of train_dataset's records, in the order it trains them."""
        ep, records = self._epoch(shard, batch_size, seed, epoch, 0, trained)
        return pipeline.record_order(lambda shuffled: records(shuffled, ids=True), records,
                                     decode.standardize, ep, decode_batch=decode.standardize)

    def eval_dataset(self, shard, batch_size):
        split = self.config.eval_split
        counts = self._counts(split)
        plan = sharding.plan_eval_read(counts, shard,
                                       dealt=sharding.round_robin(len(counts), shard.count))
        return pipeline.eval_batches(self._read(split, plan, shard, None, 0), decode.standardize,
                                     batch_size, decode.standardize)


def _builder(name: str, data_dir: str | None):
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as err:  # TFDS raises several types for an unknown or broken name
        raise usage_error("--tfds_name", name, "a TFDS dataset prepared in --data_dir",
                          f"check the name ({type(err).__name__}: {redact(str(err))[:160]}); "
                          + PREPARE_FIX) from None
    if not builder.is_prepared():
        raise usage_error("--tfds_name", f"{name} (not prepared in {data_dir})",
                          "a prepared dataset: nothing can be downloaded here", PREPARE_FIX)
    return builder


def _split_size(builder, split: str, flag: str) -> int:
    try:
        return builder.info.splits[split].num_examples
    except Exception:  # unknown split names and malformed slices raise various types
        listed = ", ".join(sorted(builder.info.splits))
        raise usage_error(flag, split, f"a split of {builder.name} ({listed}), optionally "
                          "sliced like train[:90%]", f"pass {flag}=<one of those>") from None


def _shape_and_classes(builder) -> tuple[tuple, int]:
    keys = builder.info.supervised_keys
    if not keys or len(keys) != 2:
        raise usage_error("--tfds_name", builder.name, "a dataset with (input, label) "
                          "supervised_keys", "pick a supervised dataset")
    x_feature, y_feature = builder.info.features[keys[0]], builder.info.features[keys[1]]
    shape = tuple(x_feature.shape)
    if not shape or any(d is None for d in shape):
        raise usage_error("--tfds_name", f"{builder.name} input shape {shape}",
                          "a fixed input shape (batching needs one)",
                          "convert it with a fixed --image_size via python -m horovod_train.data")
    num_classes = getattr(y_feature, "num_classes", None)
    if not num_classes:
        raise usage_error("--tfds_name", builder.name, "a ClassLabel label feature",
                          "pick a classification dataset")
    return shape, int(num_classes)


def load(data_config, *, peers=None) -> TfdsSource:
    del peers  # TFDS verifies its own downloads
    builder = _builder(data_config.tfds_name, data_config.data_dir)
    num_train = _split_size(builder, data_config.train_split, "--train_split")
    _split_size(builder, data_config.eval_split, "--eval_split")
    shape, num_classes = _shape_and_classes(builder)
    return TfdsSource(builder, data_config, num_train, shape, num_classes)
