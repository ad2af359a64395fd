"""Under elastic Horovod, a divergence verdict raised inside a compiled step reaches
the restart loop as a TensorFlow error (the drop-in's in-step check raises it from a
py_function). It must end the job, not be taken for a broken ring and rolled back."""
import pytest


tf = pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow")

from horovod.common.exceptions import HorovodInternalError  # noqa: E402

from horovod_train import divergence  # noqa: E402
from horovod_train.backends import horovod_elastic  # noqa: E402


def _inner(error):
    def attempt(state):
        raise error
    return horovod_elastic.translate_ring_errors(attempt)


def test_a_divergence_inside_a_step_ends_the_job():
    verdict = str(divergence.RanksDiverged([1], 40, "an in-step check"))
    wrapper = _inner(tf.errors.UnknownError(None, None, f"RanksDiverged: {verdict}"))
    with pytest.raises(divergence.RanksDiverged, match="rank 1 holds other weights") as err:
        wrapper(object())
    assert (err.value.ranks, err.value.step, err.value.where) == ([1], 40, "an in-step check")
    assert str(err.value) == verdict


def test_a_broken_ring_is_still_a_restart():
    wrapper = _inner(tf.errors.UnknownError(None, None, "Gloo connection reset by peer"))
    with pytest.raises(HorovodInternalError):
        wrapper(object())
