"""--shard_optimizer_state in one process (the local backend: a ring of one, so the
shard is every parameter): the same update as unsharded in both step forms and under
XLA, the checkpoint's view of the state named as unsharded, and the refusal where the
backend's collectives cannot reduce-scatter (MWMS)."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import models  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.backends.mwms_comm import MwmsComm  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402
from horovod_train.optimizer_shards import GatheredSlot, OptimizerShards  # noqa: E402
from horovod_train.step import StepOptions, TrainStep  # noqa: E402

NO, NO_STOP = tf.constant(False), tf.constant(0.0)


def _step(sharded: bool, options=StepOptions(), make=lambda: keras.optimizers.Adam(0.01, name="adam")):
    keras.utils.set_random_seed(0)
    backend = LocalBackend()
    backend.setup()
    model, optimizer = models.get_model("digits_cnn"), make()
    shards = OptimizerShards(model.trainable_variables, optimizer, backend, 40_000) \
        if sharded else None
    if not sharded:
        optimizer.build(model.trainable_variables)
    return TrainStep(model, optimizer, backend, options, shards=shards), model


def _batch(seed):
    rng = np.random.default_rng(seed)
    return rng.random((16, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 16).astype(np.int32)


@pytest.mark.parametrize("options", [StepOptions(accum_steps=2), StepOptions(jit_compile=True)],
                         ids=["accum2", "xla"])
def test_sharded_update_equals_unsharded(options):
    (plain, model_a), (sharded, model_b) = _step(False, options), _step(True, options)
    for i in range(3):
        x, y = _batch(i)
        plain.fused(x, y, NO, NO_STOP)
        run = sharded.timed if i == 1 else sharded.fused  # both forms, sharded
        run(x, y, NO, NO_STOP)
    for a, b in zip(model_a.weights, model_b.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert len(sharded.shards.layout.buckets) > 1  # digits_cnn in 40 kB buckets


def test_checkpoint_view_is_the_unsharded_optimizer_state():
    (plain, _), (sharded, _) = _step(False), _step(True)
    x, y = _batch(0)
    plain.fused(x, y, NO, NO_STOP)
    sharded.fused(x, y, NO, NO_STOP)
    view = sharded.shards.checkpoint_state()
    assert [v.path for v in view] == [v.path for v in plain.optimizer.variables]
    sharded.shards.gather_state()
    for mine, theirs in zip(view, plain.optimizer.variables):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs), rtol=1e-6, atol=1e-9)
    # A restore: new values into the slots, cut back into the shard.
    slots = [v for v in view if isinstance(v, GatheredSlot)]
    for k, slot in enumerate(slots):
        slot.assign(np.full(slot.shape, k, np.float32))
    sharded.shards.scatter_restored()
    sharded.shards.gather_state()
    for k, slot in enumerate(slots):
        assert np.all(np.asarray(slot) == k), slot.path


def test_sgd_momentum_has_one_slot_and_the_facts_say_so():
    sharded, _ = _step(True, make=lambda: keras.optimizers.SGD(0.1, momentum=0.9))
    facts = sharded.shards.facts()
    params = sum(int(np.prod(v.shape)) for v in sharded.variables)
    assert facts["optimizer_state_bytes_unsharded"] == 4 * params
    assert facts["optimizer_state_bytes_per_rank"] == 4 * params  # one rank: all of it


def test_refused_where_the_collectives_cannot_reduce_scatter():
    backend = LocalBackend()
    backend.setup()
    backend.comm = MwmsComm(backend, "ring", 10.0)
    model = models.get_model("digits_cnn")
    with pytest.raises(UsageError, match="--shard_optimizer_state: received a call under the "
                                         "'local' backend, which cannot do it"):
        OptimizerShards(model.trainable_variables, keras.optimizers.Adam(), backend, 0)
