"""The bundled digits read without importing scikit-learn (data/sources.py, for a rank's
start-up: horovod_train/lean_keras.py) are scikit-learn's own."""
import numpy as np

from horovod_train.data import sources


def test_digits_without_sklearn_equal_sklearns_load_digits():
    from sklearn.datasets import load_digits
    images, labels = sources._digits_arrays()
    bunch = load_digits()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    np.testing.assert_array_equal(images, bunch.images)
    np.testing.assert_array_equal(labels, bunch.target)
