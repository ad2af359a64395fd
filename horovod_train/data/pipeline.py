"""tf.data pipelines: in-memory arrays (global-batch sharding) and per-worker record streams.

Order of a record stream's training pipeline, and why:
  read (parallel interleave) -> shuffle (serialized records: small) ->
  batch(drop_remainder) -> decode (parallel map, one vectorized call per batch where
  the records allow it) -> take(steps) -> prefetch.
Records that decode one at a time (encoded images) are decoded to their stored dtype,
batched, then standardized per batch (decode.standardize).
With --cache the decoded examples are cached before the shuffle, so later epochs
skip reading and decoding but are still reshuffled. Without it, a shard that fits the
shuffle buffer and AUTO_CACHE_BYTES is cached in memory all the same (see auto_cache).
Every seed is derived from (seed, epoch), and interleave/map keep their order, so a
seed fixes the order.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from horovod_train.data import sharding
from horovod_train.data.decode import standardize
from horovod_train.data import stream as stream_lib
from horovod_train.data.stream import EpochStream

AUTO_SHUFFLE_BUFFER = 4096  # examples per worker when --shuffle_buffer=0
# Batches buffered across an epoch seam (see across_epochs): at most this many, and
# at most this many bytes of them.
SEAM_BATCHES, SEAM_BYTES = 8, 64 << 20
# A shard that fits the shuffle buffer and takes at most this many bytes decoded is
# cached in memory without --cache (see auto_cache); per rank, like the pools above.
AUTO_CACHE_BYTES = 64 << 20


def _autotune(threads: int):
    return threads if threads > 0 else tf.data.AUTOTUNE


def dataset_options(threads: int = 0) -> tf.data.Options:
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    # Order is fixed by seeds; AUTOTUNE may parallelise but not reorder.
    options.deterministic = True
    # Sharding is ours; stop tf.distribute from sharding a second time.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def train_dataset(data, shard: sharding.ShardInfo, batch_size: int, seed: int, epoch: int,
                  threads: int = 0) -> tf.data.Dataset:
    """One epoch of this rank's batches of in-memory `data`, in the globally agreed order."""
    return train_epochs(data, shard, batch_size, seed, epoch, epoch + 1, threads)


def train_epochs(data, shard: sharding.ShardInfo, batch_size: int, seed: int, first: int,
                 stop: int, threads: int = 0) -> tf.data.Dataset:
    """Epochs [first, stop) of this rank's batches of in-memory `data` as one dataset.

    Lazy: the arrays are one constant, and an epoch's order (sharding.train_indices) is
    drawn, and its examples gathered, only when the pipeline reaches that epoch, so
    memory and set-up are the same for 1 epoch or 1,000 (issue 46), and no epoch has a
    seam of its own. Gathering a whole epoch at once keeps the per-batch cost of slicing
    a prepared array (a gather per batch cost ~10% more CPU on digits)."""
    x, y = tf.constant(data.x_train), tf.constant(data.y_train)
    return indexed_epochs(
        lambda epoch: sharding.train_indices(len(data.x_train), shard, batch_size, seed, epoch),
        lambda ids: (tf.gather(x, ids), tf.gather(y, ids)),
        sharding.steps_per_epoch(len(data.x_train), batch_size, shard.count),
        batch_size, first, stop, threads, whole_epoch=True)


def indexed_epochs(indices, examples, steps: int, batch_size: int, first: int, stop: int,
                   threads: int = 0, whole_epoch: bool = False) -> tf.data.Dataset:
    """Epochs [first, stop) of batches examples(ids), where epoch e's ids are
    indices(e) (numpy, steps * batch_size of them, in step order), drawn when the
    pipeline reaches epoch e. `examples` takes ids of any leading shape: the epoch's
    [steps, batch_size] at once when `whole_epoch` (one copy of an epoch in memory),
    else each batch's."""
    def epoch_ids(epoch):
        return np.asarray(indices(int(epoch)), np.int64).reshape(steps, batch_size)

    def one_epoch(epoch):
        ids = tf.numpy_function(epoch_ids, [epoch], tf.int64, stateful=False)
        ids.set_shape([steps, batch_size])
        return tf.data.Dataset.from_tensor_slices(examples(ids) if whole_epoch else ids)

    ds = tf.data.Dataset.range(first, stop).flat_map(one_epoch)
    if not whole_epoch:
        ds = ds.map(examples, num_parallel_calls=_autotune(threads))
    return ds.with_options(dataset_options(threads)).prefetch(_autotune(threads))


def across_epochs(epochs: list) -> tf.data.Dataset:
    """Per-epoch datasets, in order, as one dataset (one group of stream.py's).

    An epoch's pipeline starts only when the previous one is drained: opening files
    and filling its shuffle buffer (~25 ms for digits as TFRecords on this machine)
    would stall the step at every seam, 7% of a small model's time. A prefetch after
    the seam runs that start-up while the step eats the batches buffered before it.
    The buffer is bounded in bytes too: with large batches, epochs are long and one
    stall per epoch is noise."""
    dataset = epochs[0]
    for more in epochs[1:]:
        dataset = dataset.concatenate(more)
    if len(epochs) == 1:
        return dataset  # no seam; each epoch already ends with its own prefetch
    return dataset.prefetch(seam_buffer(dataset.element_spec))


def epoch_batches(data, backend, *, batch_size: int, seed: int, threads: int, per_epoch: int,
                  epochs: int, start_step: int = 0, trained=None) -> EpochStream:
    """This rank's batches of epochs [start_step // per_epoch, epochs), starting
    `start_step` batches into the run: what the training loop trains on.

    `data` is a source (its train_dataset(shard, batch_size, seed, epoch, threads)),
    `backend` places the dataset (its distribute_dataset(dataset_fn)). A source with
    train_epochs (in-memory sets) is read from one lazily built iterator; the others
    one bounded group of epochs per iterator (stream.py says why). The order is a pure
    function of (seed, epoch): resuming at step s starts epoch s // per_epoch and
    skips the batches of it already trained on. `trained` (a record source's mask of
    the first epoch's records already trained in other layouts, layouts.py): that
    epoch is its other records instead, read under this layout, nothing skipped."""
    first_epoch, offset = divmod(start_step, per_epoch)
    lazy = getattr(data, "train_epochs", None)

    def one(shard, epoch):
        if epoch == first_epoch and trained is not None:
            rest = data.train_dataset(shard, batch_size, seed, epoch, threads, trained=trained)
            return rest.take(per_epoch - offset)
        return data.train_dataset(shard, batch_size, seed, epoch, threads).take(per_epoch)

    def some_epochs(start: int, stop: int):
        def dataset_fn(shard):
            ds = lazy(shard, batch_size, seed, start, stop, threads) if lazy else \
                across_epochs([one(shard, epoch) for epoch in range(start, stop)])
            if start == first_epoch and trained is None:
                ds = ds.skip(offset)  # inside the first epoch: offset < per_epoch
            return ds.with_options(_warm_start())
        return iter(backend.distribute_dataset(dataset_fn))

    def group(iterator) -> int:
        return stream_lib.group_size(per_epoch, element_bytes(iterator.element_spec))

    first_group = epochs - first_epoch if lazy else 1
    return EpochStream(some_epochs, first_epoch, epochs, group, first_group)


def _warm_start() -> tf.data.Options:
    # A group built ahead starts filling its buffers at once (stream.py).
    options = tf.data.Options()
    options.experimental_warm_start = True
    return options


def element_bytes(element_spec) -> int:
    """Bytes of one element, or 0 when a shape is not fully known."""
    specs = tf.nest.flatten(element_spec)
    if not all(s.shape.is_fully_defined() for s in specs):
        return 0
    return sum(s.shape.num_elements() * s.dtype.size for s in specs)


def seam_buffer(element_spec) -> int:
    """Batches to buffer across an epoch seam: SEAM_BATCHES, or fewer if they would
    take more than SEAM_BYTES."""
    batch_bytes = element_bytes(element_spec)
    if not batch_bytes:
        return 1
    return max(1, min(SEAM_BATCHES, SEAM_BYTES // batch_bytes))


def eval_dataset(data, shard: sharding.ShardInfo, batch_size: int) -> tf.data.Dataset:
    idx = sharding.eval_indices(len(data.x_test), shard)
    ds = tf.data.Dataset.from_tensor_slices((data.x_test[idx], data.y_test[idx]))
    return ds.batch(batch_size).with_options(dataset_options()).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One worker's epoch of a record stream, as train_batches needs it."""
    steps: int  # batches to yield: the loop's steps_per_epoch, identical on every rank
    batch_size: int
    records: int  # records in this worker's shard (>= steps * batch_size)
    seed: int  # this epoch's shuffle seed
    threads: int = 0
    shuffle_buffer: int = 0  # 0 = automatic
    cache: str = ""  # "", "memory" or a file prefix
    cache_key: str = ""  # names this shard's cache (memo key and file suffix)
    cacheable: bool = True  # False: always streamed (the rest of a resumed epoch, layouts.py)


def _buffer(ep: Epoch, pre_shuffled: bool) -> int:
    size = ep.shuffle_buffer or (1 if pre_shuffled else AUTO_SHUFFLE_BUFFER)
    return max(1, min(size, ep.records))


def _decoded(ds, decode, decode_batch, threads: int, batch_size: int):
    """Records -> batches of (x, y): vectorized per batch when the source can."""
    if decode_batch is not None:
        def decode_full_batch(*records):
            batch = decode_batch(*records)
            # drop_remainder fixed the batch size, but a decoder's reshape([-1, ...])
            # forgets it; a static shape lets shape-based code (across_epochs) use it.
            for tensor in tf.nest.flatten(batch):
                tensor.set_shape([batch_size, *tensor.shape[1:]])
            return batch
        return ds.batch(batch_size, drop_remainder=True).map(
            decode_full_batch, num_parallel_calls=_autotune(threads))
    return ds.map(decode, num_parallel_calls=_autotune(threads)).batch(
        batch_size, drop_remainder=True).map(standardize, num_parallel_calls=_autotune(threads))


def _decoded_records(records_fn, decode, decode_batch, threads: int) -> tf.data.Dataset:
    """This worker's records in their fixed (unshuffled) order, decoded one by one: what
    a cache holds (per-record decoders leave stored dtypes, see _decoded)."""
    ds = records_fn(False)
    if decode_batch is not None:
        return ds.batch(256).map(decode_batch, num_parallel_calls=_autotune(threads)).unbatch()
    return ds.map(decode, num_parallel_calls=_autotune(threads))


def auto_cache(ep: Epoch, example_spec) -> str:
    """The cache for this shard: --cache if given, else "memory" when the whole shard fits
    the shuffle buffer and takes at most AUTO_CACHE_BYTES decoded, else "" (stream).

    Why: a shard that fits the buffer is read in full, from its files, before each
    epoch's first batch, while the step eats only the batches buffered over the seam:
    for digits as 4 TFRecords that read took 60-110 ms on a busy 2-core host against a
    20 ms step, the bulk of the loop's data wait. From memory it takes ~1 ms, and the
    pipeline runs ~4x faster. Only such shards: their shuffle already draws a full
    permutation every epoch, from the cache as from the files, so nothing but the cost
    changes; a larger shard would lose the per-epoch file-order shuffle to the cache's
    fixed order."""
    if ep.cache:
        return ep.cache
    fits_buffer = ep.records <= (ep.shuffle_buffer or AUTO_SHUFFLE_BUFFER)
    size = ep.records * element_bytes(example_spec)
    return "memory" if fits_buffer and 0 < size <= AUTO_CACHE_BYTES else ""


def _cache_choice(ep: Epoch, decoded) -> str:
    """--cache, else auto_cache's choice for the shard's `decoded` records."""
    return ep.cache or auto_cache(ep, decoded.element_spec)


def _cached(records_fn, decode, decode_batch, ep: Epoch, memo: dict):
    """The shard's cached dataset, or None when it streams. The in-memory cache lives in
    the dataset object, so it is kept in `memo` across epochs: only eagerly (a dataset
    made inside a graph cannot outlive that graph), and so never cached automatically
    inside a graph, where every epoch would fill a cache of its own."""
    if not ep.cacheable:
        return None
    if ep.cache_key in memo:
        return memo[ep.cache_key]
    if not ep.cache and not tf.executing_eagerly():
        return None
    ds = _decoded_records(records_fn, decode, decode_batch, ep.threads)
    cache = _cache_choice(ep, ds)
    ds = ds.cache("" if cache == "memory" else f"{cache}.{ep.cache_key}") if cache else None
    if tf.executing_eagerly():
        memo[ep.cache_key] = ds
    return ds


def _order(ep: Epoch, cached: bool, pre_shuffled: bool) -> tuple[bool, int]:
    """(whether the records are read in their per-epoch order, the shuffle buffer): the
    one rule of a training epoch's record order, which train_batches reads in and
    record_order replays on record ids."""
    if cached:
        # The cache holds the fixed order. tf.data drops a cache that was read only in
        # part; a buffer reaching past the records this epoch leaves unused makes the
        # first epoch read to the end.
        return False, max(_buffer(ep, False), ep.records - ep.steps * ep.batch_size + 1)
    return True, _buffer(ep, pre_shuffled)


def _shuffled(ds, buffer: int, seed: int):
    return ds.shuffle(buffer, seed=seed) if buffer > 1 else ds


def train_batches(records_fn, decode, ep: Epoch, memo: dict, pre_shuffled: bool = False,
                  decode_batch=None) -> tf.data.Dataset:
    """records_fn(shuffled) -> this worker's records (in a per-epoch order if shuffled);
    decode: record -> (x, y); decode_batch (optional): records [B] -> batched (x, y).
    Yields exactly ep.steps batches."""
    cached = _cached(records_fn, decode, decode_batch, ep, memo)
    shuffled, buffer = _order(ep, cached is not None, pre_shuffled)
    if cached is not None:
        ds = _shuffled(cached, buffer, ep.seed).batch(ep.batch_size, drop_remainder=True)
        if decode_batch is None:  # cached in stored dtypes (see _decoded)
            ds = ds.map(standardize, num_parallel_calls=_autotune(ep.threads))
    else:
        ds = _decoded(_shuffled(records_fn(shuffled), buffer, ep.seed), decode, decode_batch,
                      ep.threads, ep.batch_size)
    ds = ds.take(ep.steps)
    return ds.with_options(dataset_options(ep.threads)).prefetch(_autotune(ep.threads))


def record_order(ids_fn, records_fn, decode, ep: Epoch, pre_shuffled: bool = False,
                 decode_batch=None) -> tf.data.Dataset:
    """The record ids of train_batches' epoch (same arguments; ids_fn(shuffled) -> the
    ids of records_fn(shuffled)'s records, in the same order), in the order it trains
    them: what layouts.py replays. Its cache choice is the one an eager train_batches
    makes (the loop builds its pipelines eagerly); nothing is read."""
    cached = ep.cacheable and bool(_cache_choice(
        ep, _decoded_records(records_fn, decode, decode_batch, ep.threads)))
    shuffled, buffer = _order(ep, cached, pre_shuffled)
    return _shuffled(ids_fn(shuffled), buffer, ep.seed).take(ep.steps * ep.batch_size)


def eval_batches(records: tf.data.Dataset, decode, batch_size: int,
                 decode_batch=None) -> tf.data.Dataset:
    if decode_batch is not None:
        ds = records.batch(batch_size).map(decode_batch, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
        ds = ds.map(standardize, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.with_options(dataset_options()).prefetch(tf.data.AUTOTUNE)


def make_epoch(data_config, num_examples: int, shard, batch_size: int, seed: int, epoch: int,
               threads: int, records: int, cache_key: str, cacheable: bool = True) -> Epoch:
    """The Epoch for a source's train_dataset call (seed mixed with epoch and shard);
    `num_examples`: the epoch's records, all workers together."""
    return Epoch(steps=sharding.steps_per_epoch(num_examples, batch_size, shard.count),
                 batch_size=batch_size, records=records,
                 seed=sharding.epoch_seed(seed, epoch, shard.index), threads=threads,
                 shuffle_buffer=data_config.shuffle_buffer, cache=data_config.cache,
                 cache_key=cache_key, cacheable=cacheable)
