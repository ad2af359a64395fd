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
    # Fixed-choice fields are checked against the choices on the field itself.
    (lambda: cfg.RuntimeConfig(collective="gloo"), ["--collective", "'gloo'", "nccl, ring"]),
    (lambda: cfg.SpeedConfig(compression="int4"), ["--compression", "bf16, fp16, none"]),
    (lambda: cfg.SpeedConfig(precision="fp8"), ["--precision", "mixed_bfloat16"]),
    (lambda: cfg.ObserveConfig(progress="tty"), ["--progress", "auto, bar, lines"]),
    (lambda: cfg.SpeedConfig(inject_nonfinite="5x1"), ["--inject_nonfinite", "'5x1'", "STEP@RANK"]),
    (lambda: cfg.RuntimeConfig(inject_delay="eval:2@1,save:1@0"),
     ["--inject_delay", "'save:1@0'", "PHASE one of eval, checkpoint"]),
    (lambda: cfg.RuntimeConfig(inject_delay="eval:nan@1"), ["--inject_delay", "'eval:nan@1'"]),
    (lambda: cfg.DataConfig(data_threads=-1), ["--data_threads", "received -1", "autotune"]),
    (lambda: cfg.TrainConfig(eval_every_epochs=-1), ["--eval_every_epochs", "received -1"]),
    (lambda: cfg.RuntimeConfig(elastic=True, backend="mwms"),
     ["--elastic", "with --backend=mwms", "Fix: drop --elastic"]),
    (lambda: cfg.RuntimeConfig(mwms_port_base=80), ["--mwms_port_base", "received 80", "1024..65000"]),
    (lambda: cfg.RuntimeConfig(intra_op_threads=-2), ["--intra_op_threads", "received -2"]),
    (lambda: cfg.RunConfig(train=cfg.TrainConfig(checkpoint_dir="/tmp/ckpt"),
                           runtime=cfg.RuntimeConfig(elastic=True)),
     ["--elastic", "with --checkpoint_dir=/tmp/ckpt", "Fix"]),
])
def test_bad_values_name_flag_value_and_fix(build, fragments):
    with pytest.raises(UsageError) as err:
        build()
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_choices_and_the_port_default_are_the_contracts():
    from horovod_train import flags
    from launch import contract
    assert contract.BACKEND_CHOICES == ("auto",) + contract.BACKENDS
    expected = {"backend": contract.BACKEND_CHOICES, "optimizer": contract.OPTIMIZERS,
                "collective": contract.COLLECTIVES, "precision": contract.PRECISIONS,
                "compression": contract.COMPRESSIONS, "progress": contract.PROGRESS_MODES,
                "jit_compile": contract.JIT_MODES}
    choices = {field.name: field.metadata["choices"] for _owner, field in flags.option_fields()
               if field.name in expected}
    assert choices == expected
    assert cfg.RuntimeConfig().mwms_port_base == contract.DEFAULT_MWMS_PORT_BASE


def test_every_field_carries_its_help():
    import dataclasses
    for section in (cfg.RunConfig, cfg.DataConfig, cfg.OptimConfig, cfg.TrainConfig,
                    cfg.RuntimeConfig, cfg.SpeedConfig, cfg.ObserveConfig):
        for field in dataclasses.fields(section):
            if not dataclasses.is_dataclass(field.default):
                assert field.metadata.get("help"), f"{section.__name__}.{field.name}"


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


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("build, flag", [
    # nan passes `value <= 0` (every comparison with nan is False) and inf passes `> 0`:
    # both used to slip through and disable what the flag bounds.
    (lambda: cfg.RuntimeConfig(collective_timeout_s=NAN), "--collective_timeout_s"),
    (lambda: cfg.RuntimeConfig(collective_timeout_s=INF), "--collective_timeout_s"),
    (lambda: cfg.RuntimeConfig(collective_timeout_s=0.0), "--collective_timeout_s"),
    (lambda: cfg.RuntimeConfig(collective_timeout_s=-1.0), "--collective_timeout_s"),
    (lambda: cfg.RuntimeConfig(seed=-1), "--seed"),
    (lambda: cfg.RuntimeConfig(seed=2 ** 32), "--seed"),
    (lambda: cfg.RuntimeConfig(fusion_threshold_mb=NAN), "--fusion_threshold_mb"),
    (lambda: cfg.RuntimeConfig(fusion_threshold_mb=INF), "--fusion_threshold_mb"),
    (lambda: cfg.RuntimeConfig(fusion_threshold_mb=-1.0), "--fusion_threshold_mb"),
    (lambda: cfg.RuntimeConfig(cycle_time_ms=NAN), "--cycle_time_ms"),
    (lambda: cfg.RuntimeConfig(cycle_time_ms=INF), "--cycle_time_ms"),
    (lambda: cfg.RuntimeConfig(cycle_time_ms=-5.0), "--cycle_time_ms"),
    (lambda: cfg.OptimConfig(learning_rate=NAN), "--learning_rate"),
    (lambda: cfg.OptimConfig(learning_rate=INF), "--learning_rate"),
    (lambda: cfg.OptimConfig(warmup_epochs=NAN), "--warmup_epochs"),
    (lambda: cfg.OptimConfig(warmup_epochs=INF), "--warmup_epochs"),
    (lambda: cfg.OptimConfig(optimizer="sgd", momentum=2.0), "--momentum"),
    (lambda: cfg.OptimConfig(optimizer="sgd", momentum=1.0), "--momentum"),
    (lambda: cfg.OptimConfig(optimizer="sgd", momentum=-0.1), "--momentum"),
    (lambda: cfg.OptimConfig(optimizer="sgd", momentum=NAN), "--momentum"),
    (lambda: cfg.ObserveConfig(baseline_samples_per_sec=NAN), "--baseline_samples_per_sec"),
    (lambda: cfg.ObserveConfig(baseline_samples_per_sec=INF), "--baseline_samples_per_sec"),
])
def test_nan_inf_and_out_of_range_numbers_are_refused(build, flag):
    with pytest.raises(UsageError) as err:
        build()
    message = str(err.value)
    assert message.startswith(f"{flag}: received ") and "; expected " in message, message
    assert ". Fix: " in message and "\n" not in message


@pytest.mark.parametrize("build", [
    lambda: cfg.RuntimeConfig(seed=0),
    lambda: cfg.RuntimeConfig(seed=2 ** 32 - 1),
    lambda: cfg.RuntimeConfig(collective_timeout_s=0.5),
    lambda: cfg.RuntimeConfig(fusion_threshold_mb=0.0, cycle_time_ms=0.0),
    lambda: cfg.OptimConfig(optimizer="sgd", momentum=0.0),
    lambda: cfg.OptimConfig(optimizer="sgd", momentum=0.99),
    lambda: cfg.OptimConfig(warmup_epochs=0.5),
    lambda: cfg.ObserveConfig(baseline_samples_per_sec=0.0),
])
def test_edges_of_the_ranges_are_accepted(build):
    build()


def test_check_positive_refuses_nan_and_inf_for_every_caller():
    from horovod_train.errors import check_positive
    for bad in (NAN, INF, -INF, 0, -1, None):
        with pytest.raises(UsageError, match="finite"):
            check_positive("--x", bad)
    check_positive("--x", 1e-9)
    check_positive("--x", 3)


def test_inject_delay_adds_up_per_phase_and_rank():
    delays = cfg.RuntimeConfig(inject_delay="eval:2@1,checkpoint:3@0,eval:1.5@1").delays()
    assert delays == (("eval", 2.0, 1), ("checkpoint", 3.0, 0), ("eval", 1.5, 1))
    assert cfg.injected_delay(delays, "eval", 1) == 3.5
    assert cfg.injected_delay(delays, "eval", 0) == 0 == cfg.injected_delay((), "eval", 1)
