"""This rank's share of a script's data: disjoint shards, equal counts on every rank.

Equal counts matter: a rank with one more batch would wait forever in its extra
allreduce. Data we sharded is remembered (weakly), so sharding it again is refused.
"""
import weakref

import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train.errors import UsageError

_SHARDED_DATASETS = weakref.WeakSet()
_SHARDED_ARRAYS = weakref.WeakValueDictionary()  # id -> array we returned from shard()


def shard(data, rank, size):
    """A tf.data.Dataset (element-wise) or numpy arrays (an array, or a tuple/list/dict)."""
    if isinstance(data, tf.data.Dataset):
        return shard_dataset(data, rank, size, _SHARDED_DATASETS)
    return shard_arrays(data, rank, size, _SHARDED_ARRAYS)


def mark_sharded(dataset):
    """Records a dataset built per rank elsewhere (distribute_dataset) as sharded."""
    _SHARDED_DATASETS.add(dataset)
    return dataset


def _already_sharded(dataset, registry) -> bool:
    stack = [dataset]
    while stack:
        ds = stack.pop()
        if ds in registry or type(ds).__name__ == "_ShardDataset":
            return True
        try:
            stack.extend(ds._inputs())
        except (AttributeError, TypeError):
            pass
    return False


def _twice_error(what):
    return UsageError(f"strategy.shard: received {what} that is already sharded (by shard(), "
                      f"distribute_dataset() or its own .shard()); expected unsharded data. Each "
                      f"rank would see 1/size^2 of the data. Fix: shard once")


def shard_dataset(dataset, rank, size, registry):
    """Element-wise shard. With a known size every rank keeps N // size elements, so
    every rank runs the same number of steps (a rank with one more would wait forever
    in its extra allreduce)."""
    if _already_sharded(dataset, registry):
        raise _twice_error("a tf.data.Dataset")
    total = int(dataset.cardinality())
    out = dataset.shard(size, rank)
    if total >= 0:
        if total < size:
            raise UsageError(f"strategy.shard: received a dataset of {total} elements; expected at "
                             f"least one per rank ({size}). Fix: shard before batching")
        out = out.take(total // size)
    elif total == tf.data.UNKNOWN_CARDINALITY:
        logging.warning("htk | strategy.shard: dataset size unknown; ranks may get different "
                        "step counts and hang. Fix: pass steps_per_epoch to fit, or "
                        "dataset.apply(tf.data.experimental.assert_cardinality(n))")
    registry.add(out)
    return out


def shard_arrays(data, rank, size, registry):
    """Rank r keeps rows r, r+size, ... of N // size * size rows: equal lengths."""
    if isinstance(data, dict):
        keys, leaves = list(data), list(data.values())
    elif isinstance(data, (tuple, list)):
        keys, leaves = None, list(data)
    else:
        keys, leaves = None, [data]
    arrays = [leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf) for leaf in leaves]
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise UsageError(f"strategy.shard: received arrays of lengths {sorted(lengths)}; expected "
                         f"one length (examples along axis 0). Fix: pass (x, y) of equal length")
    if any(registry.get(id(a)) is a for a in arrays):
        raise _twice_error("arrays")
    per_rank = lengths.pop() // size
    if per_rank == 0:
        raise UsageError(f"strategy.shard: received fewer examples than ranks ({size}); "
                         f"expected at least one per rank. Fix: use fewer ranks or more data")
    out = [a[rank:per_rank * size:size] for a in arrays]
    for a in out:
        registry[id(a)] = a
    if keys is not None:
        return dict(zip(keys, out))
    if isinstance(data, (tuple, list)):
        return type(data)(out)
    return out[0]
