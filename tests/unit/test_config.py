"""Config validation: every bad value gets received / expected / fix."""
import pytest

from horovod_train import config as cfg
from horovod_train.errors import UsageError


@pytest.mark.parametrize("build, fragments", [
    (lambda: cfg.RunConfig(model="nope"), ["--model", "'nope'", "digits_cnn", "Fix"]),
    (lambda: cfg.DataConfig(batch_size=0), ["--batch_size", "received 0", "positive"]),
    (lambda: cfg.DataConfig(batch_size=-3), ["--batch_size", "received -3"]),
    (lambda: cfg.RunConfig(data=cfg.DataConfig(dataset="imagenet")), ["--dataset", "digits"]),
    (lambda: cfg.TrainConfig(epochs=0), ["--epochs", "received 0"]),
    (lambda: cfg.TrainConfig(max_steps=-1), ["--max_steps", "received -1"]),
    (lambda: cfg.RuntimeConfig(backend="nccl"), ["--backend", "horovod", "mwms", "local"]),
    (lambda: cfg.OptimConfig(optimizer="lamb"), ["--optimizer", "adam", "sgd"]),
    (lambda: cfg.OptimConfig(learning_rate=0), ["--learning_rate"]),
    (lambda: cfg.DataConfig(data_dir="/no/such/dir"), ["--data_dir", "/no/such/dir", "existing"]),
    (lambda: cfg.SpeedConfig(jit_compile="on"), ["--jit_compile", "'on'", "auto, false, true"]),
    (lambda: cfg.resolve_jit_compile("True", 0), ["--jit_compile", "'True'", "Fix"]),
    (lambda: cfg.RunConfig(speed=cfg.SpeedConfig(jit_compile="true"),
                           runtime=cfg.RuntimeConfig(deterministic=True)),
     ["--jit_compile", "with --deterministic", "deterministic XLA", "Fix: drop --deterministic"]),
])
def test_bad_values_name_flag_value_and_fix(build, fragments):
    with pytest.raises(UsageError) as err:
        build()
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_defaults_are_valid_and_frozen():
    config = cfg.RunConfig()
    assert config.model == "digits_cnn" and config.data.dataset == "digits"
    with pytest.raises(Exception):
        config.model = "digits_mlp"


@pytest.mark.parametrize("requested, gpus, expected", [
    ("auto", 0, False),  # CPU only: off, as Keras decides for jit_compile="auto"
    ("auto", 1, True),
    ("auto", 8, True),
    ("true", 0, True),  # asked for: on, GPU or not
    ("true", 4, True),
    ("false", 0, False),
    ("false", 2, False),
])
def test_jit_compile_resolves_from_the_request_and_the_visible_gpus(requested, gpus, expected):
    assert cfg.resolve_jit_compile(requested, gpus) is expected


def test_auto_leaves_xla_off_under_op_determinism_even_with_a_gpu():
    assert cfg.resolve_jit_compile("auto", 4, deterministic=True) is False
    assert cfg.resolve_jit_compile("auto", 4, deterministic=False) is True
