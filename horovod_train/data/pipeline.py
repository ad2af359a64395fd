"""tf.data pipelines over in-memory arrays, sharded per rank."""
import tensorflow as tf

from horovod_train.data import sharding


def _autotune(threads: int):
    return threads if threads > 0 else tf.data.AUTOTUNE


def train_dataset(data, shard: sharding.ShardInfo, batch_size: int, seed: int, epoch: int,
                  threads: int = 0) -> tf.data.Dataset:
    """One epoch of this rank's batches, in the globally agreed order."""
    idx = sharding.train_indices(len(data.x_train), shard, batch_size, seed, epoch)
    ds = tf.data.Dataset.from_tensor_slices((data.x_train[idx], data.y_train[idx]))
    ds = ds.batch(batch_size, drop_remainder=True)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    # Order is already fixed by the permutation; AUTOTUNE may not reorder anything.
    options.deterministic = True
    # Sharding is ours (by global batch); stop tf.distribute from sharding again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(_autotune(threads))


def eval_dataset(data, shard: sharding.ShardInfo, batch_size: int) -> tf.data.Dataset:
    idx = sharding.eval_indices(len(data.x_test), shard)
    ds = tf.data.Dataset.from_tensor_slices((data.x_test[idx], data.y_test[idx]))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.batch(batch_size).with_options(options).prefetch(tf.data.AUTOTUNE)
