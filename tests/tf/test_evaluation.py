"""The evaluation's sums (horovod_train/evaluation.py): a shard's first EAGER_BATCHES
batches run eagerly, the rest through one traced function, and the figures are those
of the model applied batch by batch, whichever way each batch ran."""
import numpy as np
import pytest
import tensorflow as tf

from horovod_train import evaluation
from horovod_train.backends.local import LocalBackend
from models import get_model

BATCH = 4


@pytest.fixture(scope="module")
def model():
    return get_model("digits_cnn", input_shape=(8, 8, 1), num_classes=10)


def _dataset(batches: int, seed: int = 0) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    n = batches * BATCH - 1  # a shorter last batch: the traced function meets two shapes
    x = rng.random((n, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def _expected(model, dataset) -> tuple[float, float, int]:
    """The figures computed here in NumPy from the model's logits, batch by batch."""
    correct = total = 0
    loss_sum = 0.0
    for x, y in dataset:
        logits = model(x, training=False).numpy().astype(np.float64)
        y = y.numpy()
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        loss_sum += float(-log_p[np.arange(len(y)), y].sum())
        correct += int((logits.argmax(axis=-1) == y).sum())
        total += len(y)
    return correct / total, loss_sum / total, total


def _calls(monkeypatch) -> list:
    """Records, for each call of evaluation.batch_sums, whether it ran eagerly (a batch
    evaluated op by op) or was being traced (False)."""
    calls, real = [], evaluation.batch_sums

    def recording(model, x, y):
        calls.append(tf.executing_eagerly())
        return real(model, x, y)
    monkeypatch.setattr(evaluation, "batch_sums", recording)
    return calls


@pytest.mark.parametrize("batches", [5, evaluation.EAGER_BATCHES + 8])
def test_figures_equal_the_models_batch_by_batch(model, monkeypatch, batches):
    calls = _calls(monkeypatch)
    dataset = _dataset(batches)
    accuracy, loss, count = evaluation.evaluate(model, dataset, LocalBackend())
    want_accuracy, want_loss, want_count = _expected(model, dataset)
    assert count == want_count == batches * BATCH - 1
    assert accuracy == want_accuracy
    assert loss == pytest.approx(want_loss, rel=1e-6)
    eager = min(batches, evaluation.EAGER_BATCHES)
    assert calls[:eager] == [True] * eager
    if batches <= evaluation.EAGER_BATCHES:
        assert len(calls) == batches  # a small test set is never traced
    else:
        # The rest ran traced: one trace for the full batches, one for the shorter last.
        assert calls[eager:] == [False, False], calls
