"""Single-process tier for horovod_train.keras (the drop-in Keras API), on the local
backend: the optimizer wrapper's arithmetic (accumulation, loss scaling, skipping),
callbacks, sharding, and every bad-input message. Real ranks: tests/multiprocess."""
import json
import os
import socket
import subprocess
import sys
import types

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import horovod_train.keras as htk  # noqa: E402
from horovod_train.keras import callbacks as kc  # noqa: E402
from horovod_train.keras import sharding  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

from helpers import ROOT, child_env  # noqa: E402

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def strategy():
    return htk.Strategy(backend="local")


@pytest.fixture
def fp16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 6), dtype=np.float32)
    return x, (x.sum(axis=1) > 3).astype(np.int32)


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(2, dtype="float32")])


def _fit(strategy, opt, batch, epochs=1, model=None, callbacks=None, **wrap):
    model = model or _model()
    with strategy.scope():
        wrapped = strategy.distributed_optimizer(opt, **wrap)
        model.compile(optimizer=wrapped, loss=LOSS, metrics=["accuracy"])
    x, y = _data()
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
              callbacks=strategy.callbacks() if callbacks is None else callbacks)
    return model, wrapped


def _weights(model):
    return [np.asarray(w) for w in model.weights]


def test_fit_evaluate_predict_under_the_wrapper(strategy):
    model, opt = _fit(strategy, keras.optimizers.Adam(0.01), batch=16, epochs=2)
    assert type(model.optimizer) is htk.DistributedOptimizer and opt.inner_optimizer.built
    assert int(opt.iterations.numpy()) == 8 and opt.skipped_steps == 0
    loss, acc = model.evaluate(*_data(), verbose=0)
    assert np.isfinite(loss) and 0 <= acc <= 1
    assert model.predict(_data()[0][:5], verbose=0).shape == (5, 2)
    assert (strategy.rank, strategy.size, strategy.local_rank, strategy.is_chief) == (0, 1, 0, True)


def test_k_micro_batches_make_the_update_of_one_k_times_larger_batch(strategy):
    """Accumulation: 2 x 8 examples accumulated = one batch of 16 (float32, tight)."""
    accumulated, opt = _fit(strategy, keras.optimizers.SGD(0.1), batch=8, accum_steps=2)
    one_batch, _ = _fit(strategy, keras.optimizers.SGD(0.1), batch=16)
    assert int(opt.iterations.numpy()) == 4 and int(opt._iterations.numpy()) == 8
    for a, b in zip(_weights(accumulated), _weights(one_batch)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(_weights(one_batch)[0], _weights(_model())[0])  # it did train


def test_a_nonfinite_step_is_skipped_and_the_scale_halves(strategy, fp16):
    model = _model()
    start = _weights(model)
    # Steps 1 and 2 of four; the second is poisoned: one skip, one halving.
    _, opt = _fit(strategy, keras.optimizers.SGD(0.1), batch=32, model=model,
                  inject_nonfinite=(2, 0))
    assert type(model.optimizer) is htk.DistributedOptimizer  # compile did not re-wrap it
    assert opt.loss_scaling and opt.skipped_steps == 1
    assert float(opt.dynamic_scale.numpy()) == 2.0 ** 14
    assert int(opt.iterations.numpy()) == 1  # applied updates only
    assert all(np.isfinite(w).all() for w in _weights(model))
    assert not np.allclose(start[0], _weights(model)[0])


def test_fp32_also_skips_nonfinite_steps_with_scale_one(strategy):
    _, opt = _fit(strategy, keras.optimizers.SGD(0.1), batch=32, inject_nonfinite=(1, 0))
    assert not opt.loss_scaling and opt.skipped_steps == 1
    assert float(opt.dynamic_scale.numpy()) == 1.0


def test_a_keras_loss_scale_optimizer_is_unwrapped_and_its_settings_kept(strategy):
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=256.0,
                                              dynamic_growth_steps=3)
    _, opt = _fit(strategy, lso, batch=16)
    assert opt.loss_scaling and isinstance(opt.inner_optimizer, keras.optimizers.SGD)
    assert float(opt.dynamic_scale.numpy()) == 512.0  # 4 finite steps: grew once after 3


def test_checkpoint_round_trip_keeps_the_wrapper(strategy, tmp_path):
    model, _ = _fit(strategy, keras.optimizers.Adam(0.01), batch=16,
                    callbacks=strategy.callbacks(checkpoint=str(tmp_path / "m.keras")))
    assert os.listdir(tmp_path) == ["m.keras"]
    restored = keras.models.load_model(tmp_path / "m.keras")
    assert type(restored.optimizer) is htk.DistributedOptimizer
    assert isinstance(restored.optimizer.inner_optimizer, keras.optimizers.Adam)
    for a, b in zip(_weights(model), _weights(restored)):
        np.testing.assert_array_equal(a, b)


# ---- bad input ---------------------------------------------------------------------
def test_wrapping_twice_names_the_fix(strategy):
    once = strategy.distributed_optimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(UsageError, match="already an htk DistributedOptimizer.*Fix: wrap it once"):
        strategy.distributed_optimizer(once)


def test_keras_loss_scaling_around_the_wrapper_is_refused(strategy):
    wrapped = strategy.distributed_optimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(UsageError, match="expected the reverse.*Fix: strategy.distributed_opt"):
        keras.optimizers.LossScaleOptimizer(wrapped)


def test_keras_own_accumulation_and_bad_accum_steps_are_refused(strategy):
    with pytest.raises(UsageError, match="gradient_accumulation_steps=4.*accum_steps=4"):
        strategy.distributed_optimizer(keras.optimizers.SGD(0.1, gradient_accumulation_steps=4))
    with pytest.raises(UsageError, match="accum_steps: received 0"):
        strategy.distributed_optimizer(keras.optimizers.SGD(0.1), accum_steps=0)
    with pytest.raises(UsageError, match="expected a Keras 3 optimizer"):
        strategy.distributed_optimizer(object())
    assert strategy.distributed_optimizer("adam").inner_optimizer.__class__.__name__ == "Adam"


def test_optimizer_inside_a_tf_distribute_scope_is_refused(strategy):
    native = tf.distribute.MirroredStrategy(["/cpu:0"])
    with native.scope():
        with pytest.raises(UsageError, match="tf.distribute strategy scope.*Fix: build the model"):
            strategy.distributed_optimizer(keras.optimizers.SGD(0.1))
        with pytest.raises(UsageError, match="PerReplica"):
            with strategy.scope():
                pass
        made_inside = keras.optimizers.SGD(0.1)
    with pytest.raises(UsageError, match="the optimizer passed"):
        strategy.distributed_optimizer(made_inside)


def _fake(size=2, rank=0, name="horovod"):
    """A stand-in for a multi-rank strategy: collectives are the identity."""
    backend = types.SimpleNamespace(broadcast_variables=lambda v: None)
    return types.SimpleNamespace(size=size, rank=rank, is_chief=rank == 0, backend=backend,
                                 backend_name=name, allreduce_mean=lambda v: v)


def test_plain_optimizer_on_several_ranks_fails_at_train_begin():
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=LOSS)
    with pytest.raises(UsageError, match="compiled with SGD.*diverge.*distributed_optimizer"):
        model.fit(*_data(), epochs=1, verbose=0, callbacks=[kc.BroadcastInitialState(_fake())])


def test_xla_compiles_around_the_collective_and_trains_as_without(strategy, monkeypatch):
    """jit_compile=True on 'two ranks' whose reduction is a real collective op (a group of
    one, so the result is the identity): fit runs the model's step and the update under
    XLA with the collective between them (XLA on CPU would refuse it inside), and trains
    exactly as the same fit without XLA."""
    from collective_probe import ring_of_one
    from horovod_train.backends.base import ProcessInfo
    from horovod_train.keras.jit import SplitTrainStep
    plain, _ = _fit(strategy, keras.optimizers.Adam(0.01), batch=16, epochs=2)
    monkeypatch.setattr(strategy, "info", ProcessInfo(size=2))
    monkeypatch.setattr(strategy.backend, "allreduce_gradients", ring_of_one)
    model = _model()
    with strategy.scope():
        opt = strategy.distributed_optimizer(keras.optimizers.Adam(0.01))
        model.compile(optimizer=opt, loss=LOSS, metrics=["accuracy"], jit_compile=True)
    model.fit(*_data(), batch_size=16, epochs=2, shuffle=False, verbose=0,
              callbacks=strategy.callbacks())
    assert model.jit_compile is True and isinstance(model.train_step, SplitTrainStep)
    assert opt.xla is model.train_step
    assert model.train_step.split.compute.experimental_get_tracing_count() >= 1
    [update] = opt.xla.split.updates.values()
    assert update.experimental_get_tracing_count() >= 1
    assert int(opt.iterations.numpy()) == 8
    for a, b in zip(_weights(plain), _weights(model)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(_weights(model)[0], _weights(_model())[0])  # it trained
    # Compiled anew: with another optimizer the split follows it; without XLA it is undone.
    with strategy.scope():
        other = strategy.distributed_optimizer(keras.optimizers.SGD(0.01))
        model.compile(optimizer=other, loss=LOSS, jit_compile=True)
    model.fit(*_data(), batch_size=16, verbose=0, callbacks=strategy.callbacks())
    assert model.train_step.optimizer is other and int(other.iterations.numpy()) == 4
    with strategy.scope():
        model.compile(optimizer=strategy.distributed_optimizer(keras.optimizers.SGD(0.01)),
                      loss=LOSS, jit_compile=False)
    model.fit(*_data(), batch_size=16, verbose=0, callbacks=strategy.callbacks())
    assert not isinstance(model.train_step, SplitTrainStep) and other.xla is None


def test_shards_are_disjoint_equal_and_cover_for_several_sizes():
    x = np.arange(103)
    for size in (1, 2, 3, 4):
        parts = [sharding.shard_arrays(x, r, size, {}) for r in range(size)]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == 103 // size
        joined = np.concatenate(parts)
        assert len(set(joined.tolist())) == len(joined) == 103 // size * size
        ds_parts = [list(sharding.shard_dataset(tf.data.Dataset.range(103), r, size, set())
                         .as_numpy_iterator()) for r in range(size)]
        assert len({len(p) for p in ds_parts}) == 1
        assert len(set(sum(ds_parts, []))) == 103 // size * size


def test_sharding_twice_is_refused(strategy):
    x, y = _data()
    xs, ys = strategy.shard((x, y))
    with pytest.raises(UsageError, match="already sharded.*Fix: shard once"):
        strategy.shard((xs, ys))
    with pytest.raises(UsageError, match="already sharded"):
        strategy.shard(tf.data.Dataset.range(10).shard(2, 0).batch(2))
    ds = strategy.distribute_dataset(lambda ctx: tf.data.Dataset.range(10))
    with pytest.raises(UsageError, match="already sharded"):
        strategy.shard(ds)
    with pytest.raises(UsageError, match="lengths \\[3, 4\\]"):
        strategy.shard((np.zeros(3), np.zeros(4)))
    with pytest.raises(UsageError, match="expected a tf.data.Dataset"):
        strategy.distribute_dataset(lambda ctx: [1, 2])
    d = strategy.shard({"a": np.arange(4), "b": np.arange(4)})
    assert sorted(d) == ["a", "b"]


def test_distribute_dataset_hands_over_an_input_context(strategy):
    seen = []
    strategy.distribute_dataset(lambda ctx: seen.append(ctx) or tf.data.Dataset.range(4))
    ctx = seen[0]
    assert (ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.num_replicas_in_sync) == (0, 1, 1)


def test_warmup_goes_linearly_from_lr_over_size_to_lr(strategy):
    model, _ = _fit(strategy, keras.optimizers.SGD(0.4), batch=16, callbacks=[])
    warm = kc.LearningRateWarmup(_fake(size=4), warmup_epochs=1)
    warm.set_model(model)
    warm.set_params({"steps": 4})
    warm.on_train_begin()
    rates = []
    for batch in range(4):
        warm.on_train_batch_begin(batch)
        rates.append(float(model.optimizer.learning_rate.numpy()))
    warm.on_epoch_begin(1)
    warm.on_train_batch_begin(0)
    np.testing.assert_allclose(rates, [0.1, 0.175, 0.25, 0.325], rtol=1e-6)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.4)


def test_warmup_with_a_schedule_is_refused(strategy):
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(UsageError, match="ExponentialDecay.*build the warmup into your schedule"):
        _fit(strategy, keras.optimizers.SGD(schedule), batch=16,
             callbacks=[kc.LearningRateWarmup(strategy, 1)])


def test_metric_average_and_chief_only_callbacks():
    fake = _fake(size=2, rank=1)
    fake.allreduce_mean = lambda v: v * 0 + 7.0
    logs = {"loss": 1.0, "accuracy": 0.5, "name": "x"}
    kc.MetricAverage(fake)._average(logs)
    assert logs == {"loss": 7.0, "accuracy": 7.0, "name": "x"}
    extra = keras.callbacks.CSVLogger("never.csv")
    non_chief = htk.Strategy.callbacks(fake, extra, checkpoint="c.keras", warmup_epochs=1)
    assert [type(c).__name__ for c in non_chief] == [
        "BroadcastInitialState", "MetricAverage", "LearningRateWarmup", "ChiefProgbar"]
    chief = htk.Strategy.callbacks(_fake(rank=0), extra, checkpoint="c.keras")
    assert [type(c).__name__ for c in chief][-2:] == ["ModelCheckpoint", "CSVLogger"]
    bar = kc.ChiefProgbar(is_chief=False)
    bar.set_params({"verbose": 2, "epochs": 1, "steps": 3})
    assert bar.verbose == 0


def test_mwms_strategy_after_tf_ops_names_the_fix(tmp_path):
    """MWMS must configure collectives before TensorFlow runs anything."""
    script = ("import keras, tensorflow as tf; tf.constant(1.0) + 1\n"
              "import horovod_train.keras as htk\n"
              "try:\n    htk.Strategy('mwms')\nexcept Exception as e:\n    print('ERR', e)\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"cluster": {"worker": [f"localhost:{port}"]}, "task": {"type": "worker", "index": 0}}
    env = child_env(TF_CONFIG=json.dumps(config))
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=300)
    assert "ERR" in proc.stdout, proc.stderr[-3000:]
    assert "before building models or running TF ops" in proc.stdout
