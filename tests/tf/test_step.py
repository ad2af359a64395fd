"""Single-process TF tier: the step, evaluation and a short run on the local backend."""
import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import models  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop, schedules  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.step import StepOptions, TrainStep  # noqa: E402
from horovod_train.xla_split import XLA_MUST_COMPILE, xla_collectives, xla_functions  # noqa: E402

from collective_probe import OP_TYPES, RingOfOne  # noqa: E402

NO = tf.constant(False)
NO_STOP = tf.constant(0.0)  # no rank voted to stop (stopping.py)
XLA = StepOptions(jit_compile=True)


@pytest.fixture
def fp16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _setup(seed=0, options=StepOptions(), batch=16, backend=None):
    keras.utils.set_random_seed(seed)
    backend = backend or LocalBackend()
    backend.setup()
    model = models.get_model("digits_cnn")
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(seed)
    x = rng.random((batch, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    return TrainStep(model, optimizer, backend, options), model, x, y


def _assert_same_weights(model_a, model_b, rtol=1e-6, atol=1e-7):
    for a, b in zip(model_a.weights, model_b.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@pytest.mark.parametrize("options", [StepOptions(), XLA], ids=["plain", "xla"])
def test_fused_and_timed_steps_make_the_same_update(options):
    step_a, model_a, x, y = _setup(options=options)
    step_b, model_b, _, _ = _setup(options=options)
    loss_a, finite_a, _ = step_a.fused(x, y, NO, NO_STOP)
    loss_b, finite_b, _, parts = step_b.timed(x, y, NO, NO_STOP)
    assert float(loss_a) == pytest.approx(loss_b, rel=1e-6) and float(finite_a) == finite_b == 1.0
    assert set(parts) == {"compute", "comm", "optimizer"} and all(v >= 0 for v in parts.values())
    _assert_same_weights(model_a, model_b)


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "xla"])
@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_equal_one_batch_of_k_times_b(k, jit):
    """Accumulation: k micro-batches of 8 give the update of one batch of 8k, with the
    accumulation loop inside XLA or not."""
    plain, model_a, x, y = _setup(options=StepOptions(jit_compile=jit), batch=8 * k)
    accum, model_b, _, _ = _setup(options=StepOptions(accum_steps=k, jit_compile=jit),
                                  batch=8 * k)
    initial = [np.asarray(w).copy() for w in model_b.weights]
    for _ in range(3):
        loss_a, _, _ = plain.fused(x, y, NO, NO_STOP)
        loss_b, _, _ = accum.fused(x, y, NO, NO_STOP)
        assert float(loss_a) == pytest.approx(float(loss_b), rel=1e-5)
    _assert_same_weights(model_a, model_b, rtol=1e-5, atol=1e-6)
    # The steps moved every weight tensor: the comparison above is of updates, not of two
    # copies of the initial weights.
    for start, w in zip(initial, model_b.weights):
        assert not np.allclose(start, np.asarray(w), rtol=0, atol=1e-6), w.path


def _check_poisoned_step_is_skipped(options):
    step, model, x, y = _setup(options=options)
    before = [np.asarray(w).copy() for w in model.weights]
    scale = float(step.loss_scale.scale.numpy())
    _, finite, _ = step.fused(x, y, step.poison(1, 0), NO_STOP)
    assert float(finite) == 0.0
    assert float(step.loss_scale.scale.numpy()) == scale / 2
    for b, w in zip(before, model.weights):
        np.testing.assert_array_equal(b, np.asarray(w))  # skipped: nothing moved
    _, finite, _ = step.fused(x, y, step.poison(2, 0), NO_STOP)
    assert float(finite) == 1.0
    assert any(not np.array_equal(b, np.asarray(w)) for b, w in zip(before, model.weights))


def test_nonfinite_gradients_skip_the_step_and_halve_the_scale():
    _check_poisoned_step_is_skipped(StepOptions(loss_scaling=True, inject_nonfinite=(1, 0)))


def test_fp16_loss_scaling_under_xla_skips_a_poisoned_step(fp16):
    _check_poisoned_step_is_skipped(StepOptions(loss_scaling=True, inject_nonfinite=(1, 0),
                                                jit_compile=True))


def test_xla_and_plain_steps_make_the_same_update():
    plain, model_a, x, y = _setup()
    xla, model_b, _, _ = _setup(options=XLA)
    for _ in range(3):
        loss_a, _, _ = plain.fused(x, y, NO, NO_STOP)
        loss_b, _, _ = xla.fused(x, y, NO, NO_STOP)
        assert float(loss_a) == pytest.approx(float(loss_b), rel=1e-5)
    _assert_same_weights(model_a, model_b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [1, 2])
def test_collectives_stay_outside_the_xla_functions(k):
    """The fused step's graph: the gradients, the accumulation loop and the update are
    must-compile, and the one collective per gradient sits outside all of them. The step
    also runs: XLA on CPU would refuse a collective that had moved inside."""
    step, model, x, y = _setup(backend=RingOfOne(), options=StepOptions(accum_steps=k,
                                                                        jit_compile=True))
    graph = step.graph_def(x, y)
    compiled = xla_functions(graph)
    marked = [f.signature.name for f in graph.library.function
              if XLA_MUST_COMPILE in f.attr and f.attr[XLA_MUST_COMPILE].b]
    assert len(marked) == 2  # the gradients and the update
    assert (k > 1) == any(name.startswith("while_body") for name in compiled)  # the k loop
    n = len(model.trainable_variables) + 1  # one per gradient, and the stop vote
    assert xla_collectives(graph, OP_TYPES) == (n, 0)
    assert step.graph_facts(x, y) == {"collective_ops_per_step": n, "collective_ops_in_xla": 0,
                                      "xla_compiled_functions": len(compiled)}
    loss, finite, _ = step.fused(x, y, NO, NO_STOP)
    assert float(finite) == 1.0 and np.isfinite(float(loss))


def test_the_graph_check_sees_an_allreduce_moved_inside_xla():
    """The check has teeth: a step that reduces inside its XLA gradients function is
    caught in the graph (and XLA refuses to run it)."""
    class ReducesInsideXla(TrainStep):
        def _grads(self, x, y, poison):
            loss, grads = super()._grads(x, y, poison)
            return loss, self.backend.allreduce_gradients(grads)

    _, model, x, y = _setup()
    step = ReducesInsideXla(model, keras.optimizers.SGD(0.1), RingOfOne(), XLA)
    n = len(model.trainable_variables)
    # n inside XLA, and outside only the stop vote's own reduction
    assert xla_collectives(step.graph_def(x, y), OP_TYPES) == (n + 1, n)
    with pytest.raises(tf.errors.UnimplementedError, match="Collectives are not yet implemented"):
        step.fused(x, y, NO, NO_STOP)


def test_loss_scale_grows_after_interval_and_never_drops_below_one():
    from horovod_train.precision import DynamicLossScale
    scale = DynamicLossScale(True, initial=4.0, growth_interval=3)
    for _ in range(3):
        scale.update(tf.constant(True))
    assert float(scale.scale.numpy()) == 8.0 and int(scale.good_steps.numpy()) == 0
    for _ in range(10):
        scale.update(tf.constant(False))
    assert float(scale.scale.numpy()) == 1.0


def test_steps_on_one_batch_drive_its_loss_down():
    step, _, x, y = _setup()
    first = float(step.fused(x, y, NO, NO_STOP)[0])
    for _ in range(150):
        last = float(step.fused(x, y, NO, NO_STOP)[0])
    assert last < 0.5 * first


def test_warmup_schedule_goes_from_base_to_scaled_rate():
    schedule = schedules.WarmupScaledRate(0.1, 0.4, warmup_steps=10)
    assert float(schedule(0)) == pytest.approx(0.1)
    assert float(schedule(5)) == pytest.approx(0.25)
    assert float(schedule(50)) == pytest.approx(0.4)


def test_short_local_run_learns_digits(tmp_path):
    config = cfg.RunConfig(
        train=cfg.TrainConfig(epochs=4, log_every=10),
        runtime=cfg.RuntimeConfig(backend="local"),
        summary_json=str(tmp_path / "summary.json"), export_weights=str(tmp_path / "w.npz"))
    summary = loop.run(config)
    assert summary["world_size"] == 1 and summary["backend"] == "local"
    assert summary["test_accuracy"] >= 0.93
    losses = [loss for _, loss in summary["loss_history"]]
    assert losses[-1] < 0.5 * losses[0]
    assert (tmp_path / "summary.json").exists()
    weights = np.load(tmp_path / "w.npz")
    assert len(weights.files) == 8  # 4 layers x (kernel, bias)
