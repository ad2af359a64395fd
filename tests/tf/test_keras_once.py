"""The drop-in uses the package's one loss-scale rule (precision.DynamicLossScale) and
one warmup formula (schedules.warmup_rate): same numbers as the CLI loop's."""
import types

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import horovod_train.keras as htk  # noqa: E402
from horovod_train import precision, schedules  # noqa: E402


def test_the_optimizer_scale_follows_precisions_rule_step_for_step():
    """Finite and non-finite steps in a row: the wrapper's scale, step by step, is
    precision.DynamicLossScale's, and it applied only the finite steps."""
    strategy = types.SimpleNamespace(backend=None, rank=0)
    variable = keras.Variable(np.ones(3, np.float32))
    opt = htk.DistributedOptimizer(keras.optimizers.SGD(0.1), loss_scaling=True,
                                   initial_scale=64.0, dynamic_growth_steps=2)
    opt._strategy = strategy
    opt.build([variable])
    reference = precision.DynamicLossScale(True, initial=64.0, growth_interval=2)
    pattern = [True, True, True, False, True, False, False, True, True]
    for finite in pattern:
        grad = tf.fill([3], 1.0 if finite else np.inf)
        opt.unscale_check_apply([grad], [variable])
        reference.update(tf.constant(finite))
        assert float(opt.dynamic_scale.numpy()) == float(reference.scale.numpy())
    assert opt.skipped_steps == pattern.count(False)
    assert isinstance(opt._loss_scale, precision.DynamicLossScale)


def test_warmup_callback_rates_are_schedules_warmup_rate():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.8), loss="mse")
    warm = htk.LearningRateWarmup(types.SimpleNamespace(size=8), warmup_epochs=2)
    warm.set_model(model)
    warm.set_params({"steps": 5})
    warm.on_train_begin()
    for epoch in range(3):
        warm.on_epoch_begin(epoch)
        for batch in range(5):
            warm.on_train_batch_begin(batch)
            expected = schedules.warmup_rate(0.1, 0.8, (epoch + batch / 5) / 2)
            assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(expected)
