"""Horovod's Keras API names in one process: what exists, Horovod's meaning of the
optimizer's keywords, the learning-rate formulas, and the refusals. Multi-rank
behaviour is tests/multiprocess/test_hvd_api_ranks.py's."""
import types

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import horovod_train.keras as hvd  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402
from horovod_train.keras import state  # noqa: E402


def test_every_horovod_name_is_there():
    missing = [n for n in hvd.HOROVOD_NAMES if not hasattr(hvd, n)]
    for name in ("BroadcastGlobalVariablesCallback", "MetricAverageCallback",
                 "LearningRateWarmupCallback", "LearningRateScheduleCallback",
                 "BestModelCheckpoint"):
        missing += [] if hasattr(hvd.callbacks, name) else [f"callbacks.{name}"]
    for name in ("KerasState", "run", "CommitStateCallback", "UpdateBatchStateCallback",
                 "UpdateEpochStateCallback"):
        missing += [] if hasattr(hvd.elastic, name) else [f"elastic.{name}"]
    assert missing == []


def test_a_call_before_init_says_to_call_init():
    state.reset()
    assert not hvd.is_initialized()
    with pytest.raises(UsageError, match=r"hvd.size\(\).*before hvd.init\(\)"):
        hvd.size()


def test_one_process_answers(joined):
    assert (hvd.size(), hvd.rank(), hvd.local_rank(), hvd.local_size()) == (1, 0, 0, 1)
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1) and not hvd.mpi_enabled()
    assert hvd.allreduce([1.0, 2.0]).numpy().tolist() == [1.0, 2.0]
    assert hvd.allreduce([1.0], op=hvd.Sum, postscale_factor=3.0).numpy().tolist() == [3.0]
    with pytest.raises(UsageError, match="average=True and op=hvd.Sum"):
        hvd.allreduce([1.0], average=True, op=hvd.Sum)
    with pytest.raises(UsageError, match="'local' backend"):
        hvd.allreduce([1.0], op=hvd.Adasum)
    with pytest.raises(UsageError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)
    assert hvd.broadcast_object({"a": 1}) == {"a": 1} and hvd.allgather_object(3) == [3]
    hvd.shutdown()
    assert not hvd.is_initialized()


def _steps(opt, passes, variable):
    for _ in range(passes):
        opt.apply_gradients([(tf.ones([1]), variable)], experimental_aggregate_gradients=False)
    return float(variable.numpy()[0])


@pytest.mark.parametrize("average, expected", [(False, -4.0), (True, -2.0)])
def test_backward_passes_per_step_sums_unless_asked_to_average(joined, average, expected):
    """Horovod's meaning: 4 passes of gradient 1, k=2 -> 2 updates of 2 (sum) or 1."""
    variable = keras.Variable(np.zeros(1, np.float32))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=2,
                                   average_aggregated_gradients=average)
    assert _steps(opt, 4, variable) == expected
    assert int(opt.iterations.numpy()) == 4  # backward passes, as Horovod counts
    assert int(opt._agg_helper.counter.numpy()) == 0


def test_our_accum_steps_averages_and_counts_updates(joined):
    variable = keras.Variable(np.zeros(1, np.float32))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), accum_steps=2)
    assert _steps(opt, 4, variable) == -2.0 and int(opt.iterations.numpy()) == 2


def test_config_round_trip_as_horovods_test_asks(joined):
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(), compression=hvd.Compression.fp16,
                                   backward_passes_per_step=3)
    config = opt.get_config()
    assert opt.from_config(config).get_config() == config
    assert type(opt).from_config(config).get_config() == config
    assert config["name"] == "DistributedAdam" and config["compression"] == "fp16"


def test_compute_gradients_then_apply_gradients(joined):
    variable = keras.Variable(np.full(2, 3.0, np.float32))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5))
    pairs = opt._compute_gradients(lambda: tf.reduce_sum(variable.value ** 2), [variable])
    assert pairs[0][0].numpy().tolist() == [6.0, 6.0]
    opt.apply_gradients(pairs)
    assert variable.numpy().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("kwargs, match", [
    ({"op": hvd.Min}, "hvd.Average or hvd.Sum"),
    ({"groups": -1}, "groups: received -1"),
    ({"compression": "zip"}, "compression: received 'zip'"),
    ({"backward_passes_per_step": 0}, "backward_passes_per_step: received 0"),
    ({"backward_passes_per_step": 2, "accum_steps": 3}, "expected one of them"),
    ({"divergence_check_steps": -5}, "divergence_check_steps: received -5"),
    ({"gradient_predivide_factor": float("nan")}, "gradient_predivide_factor"),
])
def test_bad_optimizer_keywords_are_refused(joined, kwargs, match):
    with pytest.raises(UsageError, match=match):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)


def _rates(callback, epochs, steps):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    callback.set_model(model)
    callback.set_params({"steps": steps})
    callback.on_train_begin()
    out = []
    for epoch in range(epochs):
        callback.on_epoch_begin(epoch)
        for batch in range(steps):
            callback.on_train_batch_begin(batch)
            out.append(float(model.optimizer.learning_rate.numpy()))
    return out


def test_schedule_callback_is_initial_lr_times_multiplier_per_epoch():
    rates = _rates(hvd.callbacks.LearningRateScheduleCallback(
        initial_lr=1.0, multiplier=0.5, start_epoch=1, end_epoch=3), epochs=4, steps=2)
    # Epoch 0 is outside the window (the optimizer's own 0.1); epoch 3 keeps epoch 2's.
    assert rates == pytest.approx([0.1, 0.1, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5])


def test_warmup_callback_follows_horovods_formula():
    """lr(e) = lr / size * (e * (size - 1) / warmup + 1), e one batch ahead."""
    state.activate(types.SimpleNamespace(size=4, is_chief=True))
    try:
        rates = _rates(hvd.callbacks.LearningRateWarmupCallback(initial_lr=2.0, warmup_epochs=2),
                       epochs=3, steps=4)
    finally:
        state.reset()
    expected = [2.0 / 4 * ((e + b / 4 + 1 / 4) * 3 / 2 + 1) for e in range(2) for b in range(4)]
    assert rates[:8] == pytest.approx(expected)
    assert rates[7] == pytest.approx(2.0) and rates[8:] == pytest.approx([2.0] * 4)


def test_best_model_checkpoint_needs_a_filepath(joined):
    callback = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    with pytest.raises(UsageError, match="BestModelCheckpoint: received no filepath"):
        callback.on_train_begin()


def test_load_model_refuses_keras2_optimizers(tmp_path):
    with pytest.raises(UsageError, match="legacy_opts"):
        hvd.load_model(str(tmp_path / "m.keras"), legacy_opts=True)
