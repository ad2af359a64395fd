"""Single-process TF tier: the step, evaluation and a short run on the local backend."""
import numpy as np
import pytest

pytestmark = pytest.mark.tf

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import models  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.step import TrainStep  # noqa: E402


def _setup(seed=0):
    keras.utils.set_random_seed(seed)
    backend = LocalBackend()
    backend.setup()
    model = models.get_model("digits_cnn")
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(seed)
    x = rng.random((16, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    return TrainStep(model, optimizer, backend), model, x, y


def test_fused_and_timed_steps_make_the_same_update():
    step_a, model_a, x, y = _setup()
    step_b, model_b, _, _ = _setup()
    loss_a = float(step_a.fused(x, y))
    loss_b, parts = step_b.timed(x, y)
    assert loss_a == pytest.approx(loss_b, rel=1e-6)
    assert set(parts) == {"compute", "comm", "optimizer"} and all(v >= 0 for v in parts.values())
    for a, b in zip(model_a.weights, model_b.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_steps_on_one_batch_drive_its_loss_down():
    step, _, x, y = _setup()
    first = float(step.fused(x, y))
    for _ in range(150):
        last = float(step.fused(x, y))
    assert last < 0.5 * first


def test_warmup_schedule_goes_from_base_to_scaled_rate():
    schedule = loop.WarmupScaledRate(0.1, 0.4, warmup_steps=10)
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
