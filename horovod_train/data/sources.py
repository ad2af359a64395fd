"""In-memory data sources: the bundled digits set and synthetic data of any shape."""
import dataclasses

import numpy as np

# Fixed split of scikit-learn's digits: 1797 images, the last 360 of a seed-0
# permutation are the test set (20%), so every run and every rank agrees.
DIGITS_TEST_SIZE = 360
DIGITS_SPLIT_SEED = 0


@dataclasses.dataclass(frozen=True, eq=False)
class ArrayData:
    """An in-memory source. Every source offers the same five members, which are all
    the training loop uses: num_train_examples, input_shape, num_classes,
    train_dataset(shard, batch_size, seed, epoch, threads), eval_dataset(shard, batch_size).
    In-memory sources offer a sixth, train_epochs(shard, batch_size, seed, first, stop,
    threads): many epochs as one lazily built dataset (pipeline.train_epochs)."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    # A step's examples are a function of the global batch alone (sharding.py), whatever
    # the number of ranks: a checkpoint continues exactly on another one (resume.py).
    by_global_batch = True

    @property
    def input_shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])

    @property
    def num_train_examples(self) -> int:
        return len(self.x_train)

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0):
        from horovod_train.data import pipeline
        return pipeline.train_dataset(self, shard, batch_size, seed, epoch, threads)

    def train_epochs(self, shard, batch_size, seed, first, stop, threads=0):
        from horovod_train.data import pipeline
        return pipeline.train_epochs(self, shard, batch_size, seed, first, stop, threads)

    def eval_dataset(self, shard, batch_size):
        from horovod_train.data import pipeline
        return pipeline.eval_dataset(self, shard, batch_size)


def _digits_arrays() -> tuple:
    """scikit-learn's digits as its load_digits gives them: (images 8x8 in 0..16, labels).
    Read from the CSV scikit-learn ships, without importing it: scikit-learn and the SciPy
    it loads took most of a second of every rank's start-up (lean_keras.py: why a rank's
    imports matter)."""
    import gzip
    import importlib.util
    import os
    spec = importlib.util.find_spec("sklearn")  # a top-level spec: sklearn is not run
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn is not installed", name="sklearn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if not os.path.isfile(path):  # a layout we do not know: scikit-learn's own loader
        from sklearn.datasets import load_digits as sk_load_digits
        bunch = sk_load_digits()
        return bunch.images, bunch.target
    with gzip.open(path, "rt", encoding="utf-8") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def load_digits(data_config, *, peers=None) -> ArrayData:
    """scikit-learn's 8x8 handwritten digits (real data shipped inside the package)."""
    del data_config, peers  # bundled: no --data_dir, nothing to verify
    images, labels = _digits_arrays()
    x = (images / 16.0).astype(np.float32)[..., None]
    y = labels.astype(np.int32)
    perm = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(x))
    train, test = perm[:-DIGITS_TEST_SIZE], perm[-DIGITS_TEST_SIZE:]
    return ArrayData(x[train], y[train], x[test], y[test], num_classes=10)


# Synthetic data keeps at most this many bytes of distinct examples in memory; larger
# sets (e.g. --synthetic_shape=224,224,3) reuse the pool cyclically, which is what a
# throughput benchmark needs: real-sized tensors without gigabytes of RAM.
SYNTHETIC_POOL_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True, eq=False)
class PooledData:
    """Synthetic examples: example g is pool[g % len(pool)] with label labels[g]; the
    first num_test examples are the eval set. Sharded by global batch like ArrayData."""
    pool: np.ndarray
    labels: np.ndarray
    num_test: int
    num_classes: int
    by_global_batch = True  # as ArrayData's

    @property
    def input_shape(self) -> tuple:
        return tuple(self.pool.shape[1:])

    @property
    def num_train_examples(self) -> int:
        return len(self.labels) - self.num_test

    def _examples(self, global_ids):
        import tensorflow as tf
        pool, labels = tf.constant(self.pool), tf.constant(self.labels)
        return lambda i: (tf.gather(pool, (i + global_ids) % len(self.pool)),
                          tf.gather(labels, i + global_ids))

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0):
        return self.train_epochs(shard, batch_size, seed, epoch, epoch + 1, threads)

    def train_epochs(self, shard, batch_size, seed, first, stop, threads=0):
        from horovod_train.data import pipeline, sharding
        n = self.num_train_examples
        return pipeline.indexed_epochs(
            lambda epoch: sharding.train_indices(n, shard, batch_size, seed, epoch),
            self._examples(self.num_test), sharding.steps_per_epoch(n, batch_size, shard.count),
            batch_size, first, stop, threads)

    def eval_dataset(self, shard, batch_size):
        import tensorflow as tf
        from horovod_train.data import pipeline, sharding
        idx = sharding.eval_indices(self.num_test, shard)
        ds = tf.data.Dataset.from_tensor_slices(idx).batch(batch_size)
        ds = ds.map(self._examples(0), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.with_options(pipeline.dataset_options()).prefetch(tf.data.AUTOTUNE)


def load_synthetic(data_config, num_classes=10, *, peers=None) -> PooledData:
    """Random inputs with random labels, any shape: for throughput, never for accuracy.

    With the default 4096 examples of 8x8x1 the pool holds every example, drawn exactly
    as before (same generator, same order), so small runs are unchanged."""
    del peers  # generated here: nothing to verify
    shape = tuple(data_config.synthetic_shape)
    num_examples = data_config.synthetic_examples
    example_bytes = 4 * int(np.prod(shape))
    pool_size = max(1, min(num_examples, SYNTHETIC_POOL_BYTES // example_bytes))
    rng = np.random.default_rng(1234)
    pool = rng.standard_normal((pool_size, *shape), dtype=np.float32)
    labels = rng.integers(0, num_classes, num_examples, dtype=np.int32)
    return PooledData(pool, labels, num_test=num_examples // 8, num_classes=num_classes)
