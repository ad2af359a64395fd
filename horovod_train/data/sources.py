"""In-memory data sources: the bundled digits set and synthetic data."""
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
    train_dataset(shard, batch_size, seed, epoch, threads), eval_dataset(shard, batch_size)."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])

    @property
    def num_train_examples(self) -> int:
        return len(self.x_train)

    def train_dataset(self, shard, batch_size, seed, epoch, threads=0):
        from horovod_train.data import pipeline
        return pipeline.train_dataset(self, shard, batch_size, seed, epoch, threads)

    def eval_dataset(self, shard, batch_size):
        from horovod_train.data import pipeline
        return pipeline.eval_dataset(self, shard, batch_size)


def load_digits(data_config) -> ArrayData:
    """scikit-learn's 8x8 handwritten digits (real data shipped inside the package)."""
    from sklearn.datasets import load_digits as sk_load_digits
    del data_config  # bundled: no --data_dir needed (DataConfig checked any given)
    bunch = sk_load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[..., None]
    y = bunch.target.astype(np.int32)
    perm = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(x))
    train, test = perm[:-DIGITS_TEST_SIZE], perm[-DIGITS_TEST_SIZE:]
    return ArrayData(x[train], y[train], x[test], y[test], num_classes=10)


def load_synthetic(data_config, num_examples=4096, shape=(8, 8, 1), num_classes=10) -> ArrayData:
    """Random inputs with random labels: for throughput, never for accuracy."""
    del data_config
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((num_examples, *shape), dtype=np.float32)
    y = rng.integers(0, num_classes, num_examples, dtype=np.int32)
    split = num_examples // 8
    return ArrayData(x[split:], y[split:], x[:split], y[:split], num_classes)
