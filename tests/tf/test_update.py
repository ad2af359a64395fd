"""The update kernel's bookkeeping, one process: which gradients one reduction carries
(riders included), local and summed gradients, the k-call accumulator, and the skip."""
import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")

from horovod_train import update  # noqa: E402
from horovod_train.precision import DynamicLossScale  # noqa: E402


class Halving:
    """A two-rank mean whose peer holds zeros: each value halves. Records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, tensors):
        self.calls.append(len(tensors))
        return [t / 2 for t in tensors]


def _values(grads):
    return [None if g is None else np.asarray(g).tolist() for g in grads]


def test_one_reduction_carries_the_shared_gradients_and_the_riders():
    reduce = Halving()
    grads, riders = update.reduce_gradients(
        [tf.constant([2.0]), None, tf.constant([4.0])], reduce, riders=[tf.constant([1.0])])
    assert reduce.calls == [3]  # two gradients and the rider, in one call
    assert _values(grads) == [[1.0], None, [2.0]] and _values(riders) == [[0.5]]


def test_local_gradients_stay_local_scaled_by_size_and_sum_multiplies_the_mean():
    reduce = Halving()
    opts = update.UpdateOptions(sum_over_ranks=True)
    grads, _ = update.reduce_gradients([tf.constant([2.0]), tf.constant([4.0])], reduce,
                                       local=[False, True], size=2, options=opts)
    assert reduce.calls == [1] and _values(grads) == [[2.0], [2.0]]
    kept = update.UpdateOptions(scale_local_gradients=False)
    grads, _ = update.reduce_gradients([tf.constant([4.0])], reduce, local=[True], size=2,
                                       options=kept)
    assert reduce.calls == [1] and _values(grads) == [[4.0]]  # nothing to reduce: no call


@pytest.mark.parametrize("mean", [True, False])
def test_the_accumulator_flushes_every_kth_call_with_the_mean_or_the_sum(mean):
    opts = update.UpdateOptions(accum_steps=3, mean_of_micro_batches=mean)
    acc = update.Accumulator([tf.Variable([0.0])], lambda v: tf.Variable(tf.zeros_like(v)), opts)
    flushed = tf.Variable([-1.0])
    for call in range(6):
        acc.add([tf.constant([float(call)])], tf.constant(call),
                lambda total: flushed.assign(total[0]))
        if call == 2:
            assert flushed.numpy().tolist() == ([1.0] if mean else [3.0])
    assert flushed.numpy().tolist() == ([4.0] if mean else [12.0])  # 3 + 4 + 5
    assert acc.slots[0].numpy().tolist() == [0.0]


def test_a_nonfinite_update_is_skipped_counted_and_halves_the_scale():
    scale = DynamicLossScale(True, initial=8.0)
    applied, skipped = [], tf.Variable(0)
    for g in ([16.0, np.inf], [16.0, 8.0]):
        finite = update.apply_update([tf.constant(g), None], scale,
                                     lambda grads: applied.append(_values(grads)),
                                     on_skip=lambda: skipped.assign_add(1))
    assert bool(finite) and int(skipped.numpy()) == 1
    assert float(scale.scale.numpy()) == 4.0
    assert applied[-1] == [[4.0, 2.0], None]  # unscaled by the halved scale
