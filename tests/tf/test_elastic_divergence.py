"""The in-step divergence verdict is a tensor the caller acts on: a step the check
stopped fails with the guard's line (an assertion, which the elastic restart loop does
not take for a broken ring), and the caller that holds the optimizer raises the typed
RanksDiverged from its Verdict, never from the error's text."""
import types

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow")
import keras  # noqa: E402
from horovod.common.exceptions import HorovodInternalError  # noqa: E402

import horovod_train.keras as htk  # noqa: E402
from horovod_train import divergence  # noqa: E402
from horovod_train.backends import horovod_elastic  # noqa: E402
from horovod_train.keras import divergence_guard, elastic  # noqa: E402

AGREE = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
RANK_1_DIFFERS = [[1.0, 2.0], [1.0, 2.5], [1.0, 2.0]]


def _checked_step(verdict, rows):
    """An attempt whose compiled step takes the in-step verdict on gathered `rows` at
    update 40, as the optimizer's check does after its allreduce."""
    @tf.function
    def step(rows, update):
        mask = divergence.differing_mask(rows)
        verdict.record(mask, update)
        divergence_guard.stop_if_diverged(mask, update)
        return update
    return lambda *_: step(tf.constant(rows, tf.float64), tf.constant(40, tf.int64))


@pytest.fixture
def optimizer():
    return htk.DistributedOptimizer(keras.optimizers.SGD(0.1))


def test_the_graph_mask_is_the_host_comparison():
    nan = float("nan")
    for rows in (AGREE, RANK_1_DIFFERS, [[nan, 1.0], [nan, 1.0]], [[0.0, 1.0], [-0.0, 1.0]],
                 [[1.0, 1.0], [1.0, 1.0], [1.0, np.nextafter(1.0, 2.0)], [3.0, 1.0]]):
        mask = divergence.differing_mask(tf.constant(rows, tf.float64)).numpy()
        assert np.flatnonzero(mask).tolist() == divergence.differing_ranks(rows), rows


def test_agreeing_ranks_record_a_clean_verdict(optimizer):
    step = _checked_step(optimizer.verdict, AGREE)
    assert int(horovod_elastic.translate_ring_errors(step)(object())) == 40
    assert optimizer.verdict.take() is None


def test_a_stopped_step_ends_the_job_with_the_typed_verdict(optimizer):
    step = horovod_elastic.translate_ring_errors(_checked_step(optimizer.verdict, RANK_1_DIFFERS))
    # Not a broken ring (that would roll back to a commit and hide the divergence).
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="ranks diverged: rank 1 holds other weights") as raw:
        step(object())
    expected = divergence.message([1], 40, divergence_guard.IN_STEP)
    assert expected in str(raw.value)
    state = types.SimpleNamespace(optimizer=optimizer)
    with pytest.raises(divergence.RanksDiverged) as err:
        elastic._raising_verdicts(step)(state)
    assert (err.value.ranks, err.value.step, str(err.value)) == ([1], 40, expected)
    assert optimizer.verdict.take() is None  # taken once: a later error is not it


def test_other_errors_pass_through_untouched(optimizer):
    def broken(state):
        raise tf.errors.UnknownError(None, None, "Gloo connection reset by peer")
    state = types.SimpleNamespace(optimizer=optimizer)
    with pytest.raises(tf.errors.UnknownError):
        elastic._raising_verdicts(broken)(state)
    with pytest.raises(HorovodInternalError):
        horovod_elastic.translate_ring_errors(elastic._raising_verdicts(broken))(state)


def test_a_tape_loops_stopped_step_raises_the_tape_guards_typed_verdict():
    """Issue 40: a GradientTape loop under hvd.elastic.run has no DistributedOptimizer;
    the verdict is its tape guard's, kept by the job, and named as the tape's check."""
    from horovod_train.keras import state as job
    job.reset()
    htk.init()
    try:
        guard = divergence_guard.source_guard(job.active(), [tf.Variable(1.0)], every=5)

        @tf.function
        def step(rows, update):
            mask = divergence.differing_mask(rows)
            guard.verdict.record(mask, update)
            divergence_guard.stop_if_diverged(mask, update, divergence_guard.IN_TAPE)
            return update
        attempt = lambda *_: step(tf.constant(RANK_1_DIFFERS, tf.float64),  # noqa: E731
                                  tf.constant(12, tf.int64))
        with pytest.raises(divergence.RanksDiverged) as err:
            elastic._raising_verdicts(attempt)(types.SimpleNamespace(optimizer=None))
        assert str(err.value) == divergence.message([1], 12, divergence_guard.IN_TAPE)
        guard.calls.assign(7)
        divergence_guard.restart_source_guards(job.active())
        assert int(guard.calls) == 0  # after an elastic sync, every rank starts again at 0
    finally:
        job.reset()
