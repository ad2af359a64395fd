"""Frozen, validated run configuration. TF-free.

Flags become these dataclasses once (flags.config_from_flags); everything below the
CLI takes a RunConfig and never reads flags or os.environ for settings. Validation
happens in __post_init__ so a bad config cannot exist, whichever way it was built.
"""
import dataclasses
import os

from horovod_train.errors import check_choice, check_positive, check_range, usage_error

BACKENDS = ("auto", "horovod", "mwms", "local")
OPTIMIZERS = ("adam", "sgd")
COLLECTIVES = ("auto", "ring", "nccl")
PRECISIONS = ("fp32", "mixed_float16", "mixed_bfloat16")
COMPRESSIONS = ("none", "fp16", "bf16")
PROGRESS_MODES = ("auto", "bar", "lines")
JIT_MODES = ("auto", "true", "false")


@dataclasses.dataclass(frozen=True)
class SpeedConfig:
    """The levers: precision, accumulation, recomputation, compression."""
    precision: str = "fp32"
    grad_accum_steps: int = 1  # micro-batches of --batch_size per optimizer step
    gradient_checkpointing: bool = False
    compression: str = "none"  # gradients on the wire
    max_nonfinite_steps: int = 20  # consecutive skipped steps before the run gives up
    inject_nonfinite: str = ""  # "STEP@RANK": poison that rank's gradients (fault tests)
    jit_compile: str = "auto"  # XLA around the collectives; resolve_jit_compile says when

    def __post_init__(self):
        check_choice("--precision", self.precision, PRECISIONS)
        check_choice("--jit_compile", self.jit_compile, JIT_MODES)
        check_choice("--compression", self.compression, COMPRESSIONS)
        if not isinstance(self.grad_accum_steps, int) or self.grad_accum_steps < 1:
            raise usage_error("--grad_accum_steps", self.grad_accum_steps, "an integer >= 1",
                              "pass --grad_accum_steps=1 (no accumulation) or more")
        check_positive("--max_nonfinite_steps", self.max_nonfinite_steps)
        if self.inject_nonfinite:
            self.injection()  # validates

    def injection(self) -> tuple | None:
        if not self.inject_nonfinite:
            return None
        step, _, rank = self.inject_nonfinite.partition("@")
        if not (step.isdigit() and rank.isdigit()):
            raise usage_error("--inject_nonfinite", self.inject_nonfinite, "STEP@RANK, e.g. 5@1",
                              "pass --inject_nonfinite=5@1 or leave it empty")
        return int(step), int(rank)


def resolve_jit_compile(requested: str, visible_gpus: int, deterministic: bool = False) -> bool:
    """--jit_compile and the GPUs this rank sees -> whether the step's compute is XLA.

    auto follows Keras's own default: on with a GPU, where fusing the step's many small
    kernels is what XLA is for; off on CPU, where it measured slower (bench/xla.py: 1.3x
    to 2x the step time on 2 cores) and every new input shape costs a compile; off under
    op determinism, for which XLA lacks kernels (see RunConfig)."""
    check_choice("--jit_compile", requested, JIT_MODES)
    if requested == "auto":
        return visible_gpus > 0 and not deterministic
    return requested == "true"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    dataset: str = "digits"
    data_dir: str | None = None
    batch_size: int = 32  # per replica; the global batch is batch_size * world size
    data_threads: int = 0  # 0 = tf.data.AUTOTUNE
    # File-backed sources and pipeline knobs (rules in horovod_train/data/options.py).
    tfds_name: str | None = None  # --dataset=tfds: builder name, e.g. mnist or mnist:3.0.1
    train_split: str = "train"  # TFDS accepts slices, e.g. train[:90%]
    eval_split: str = "test"
    shuffle_buffer: int = 0  # 0 = automatic
    cache: str = ""  # "" = off, "memory", or a file prefix for tf.data's file cache
    skip_corrupt: bool = False  # skip unreadable records (counted and logged) instead of failing
    verify_data: bool = True  # read every record once at load, so corruption fails before step 1
    synthetic_shape: tuple = (8, 8, 1)
    synthetic_examples: int = 4096

    def __post_init__(self):
        from horovod_train.data import options  # TF-free
        object.__setattr__(self, "synthetic_shape", options.parse_shape(self.synthetic_shape))
        options.validate(self)
        check_positive("--batch_size", self.batch_size)
        if self.data_dir and not os.path.isdir(self.data_dir):
            raise usage_error("--data_dir", self.data_dir, "an existing directory",
                              "create it or fix the path (bundled sets need no --data_dir)")
        if self.data_threads < 0:
            raise usage_error("--data_threads", self.data_threads, "0 (autotune) or a positive count",
                              "pass --data_threads=0")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    optimizer: str = "adam"
    # Per-replica rate; the applied rate is learning_rate * world size (linear scaling),
    # reached after warmup_epochs of linear warmup from learning_rate.
    learning_rate: float = 0.002
    momentum: float = 0.9  # sgd only
    warmup_epochs: float = 0.0
    scale_lr: bool = True

    def __post_init__(self):
        check_choice("--optimizer", self.optimizer, OPTIMIZERS)
        check_positive("--learning_rate", self.learning_rate,
                       "pass --learning_rate=0.002 (Adam) or 0.05 (SGD), per replica")
        # Checked for adam too, where it is unused: a value out of range is a typo either way.
        check_range("--momentum", self.momentum, 0.0, 1.0, high_open=True,
                    expected="a finite number with 0 <= momentum < 1",
                    fix="pass --momentum=0.9 (or 0 for plain SGD)")
        check_range("--warmup_epochs", self.warmup_epochs, 0.0, expected="a finite number >= 0",
                    fix="pass --warmup_epochs=0 to disable warmup, or e.g. 5")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    max_steps: int = 0  # 0 = no cap; otherwise stop after this many optimizer steps
    log_every: int = 20
    eval_every_epochs: int = 1  # 0 = evaluate only at the end
    eval_at_start: bool = False  # evaluate the untrained (or just restored) model too
    checkpoint_dir: str | None = None
    checkpoint_every: str = "1e"  # "N" steps or "Ne" epochs
    keep_checkpoints: int = 3

    def __post_init__(self):
        check_positive("--epochs", self.epochs)
        check_positive("--log_every", self.log_every)
        if self.max_steps < 0:
            raise usage_error("--max_steps", self.max_steps, "0 (no cap) or a positive step count",
                              "pass --max_steps=N with N > 0, or 0")
        check_positive("--keep_checkpoints", self.keep_checkpoints)
        self.checkpoint_interval(1)  # validates --checkpoint_every
        if self.eval_every_epochs < 0:
            raise usage_error("--eval_every_epochs", self.eval_every_epochs, "an integer >= 0",
                              "pass --eval_every_epochs=1")


    def checkpoint_interval(self, steps_per_epoch: int) -> int:
        """--checkpoint_every in optimizer steps ("500" or "2e" for every 2 epochs)."""
        raw = str(self.checkpoint_every)
        count = raw[:-1] if raw.endswith("e") else raw
        if not count.isdigit() or int(count) < 1:
            raise usage_error("--checkpoint_every", raw, "N steps or Ne epochs with N >= 1, e.g. 500 or 1e",
                              "pass --checkpoint_every=1e")
        return int(count) * (steps_per_epoch if raw.endswith("e") else 1)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    backend: str = "auto"
    seed: int = 42
    intra_op_threads: int = 0  # 0 = cores / local ranks
    inter_op_threads: int = 0  # 0 = 2 when sharing cores, TF's default otherwise
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism
    collective: str = "auto"  # mwms: CommunicationImplementation
    collective_timeout_s: float = 300.0  # bounds a stuck collective / missing peer
    stop_grace_s: float = 60.0  # after SIGTERM: reach a step boundary and checkpoint within this
    mwms_port_base: int = 12345  # mwms worker i listens on base + its local rank (as launch/)
    fusion_threshold_mb: float = 0.0  # horovod: 0 = Horovod's default (128 MiB)
    cycle_time_ms: float = 0.0  # horovod: 0 = Horovod's default, or 5 on shared CPU cores
    hierarchical_allreduce: bool = False  # horovod: intra-node then inter-node
    elastic: bool = False  # horovod under horovodrun --min-np/--max-np: ranks may come and go
    elastic_commit_every: int = 10  # steps between in-memory commits (steps redone on a loss)

    def __post_init__(self):
        check_choice("--backend", self.backend, BACKENDS)
        check_choice("--collective", self.collective, COLLECTIVES)
        # nan or inf would turn every bound on a stuck peer into "wait forever".
        check_positive("--collective_timeout_s", self.collective_timeout_s,
                       "pass --collective_timeout_s=300 (seconds; above your longest "
                       "evaluation or checkpoint write)")
        # numpy (keras.utils.set_random_seed) takes seeds in 0..2**32-1 only.
        check_range("--seed", self.seed, 0, 2 ** 32 - 1, expected="an integer in 0..4294967295",
                    fix="pass --seed=42")
        for flag, value, example in (("--fusion_threshold_mb", self.fusion_threshold_mb, 64),
                                     ("--cycle_time_ms", self.cycle_time_ms, 5)):
            check_range(flag, value, 0.0, expected="0 (Horovod's default) or a finite positive number",
                        fix=f"pass {flag}=0, or e.g. {flag}={example}")
        check_positive("--elastic_commit_every", self.elastic_commit_every)
        check_positive("--stop_grace_s", self.stop_grace_s,
                       "pass --stop_grace_s=60 (seconds from SIGTERM to the checkpoint; below "
                       "your scheduler's kill delay)")
        if self.elastic and self.backend not in ("auto", "horovod"):
            raise usage_error("--elastic", f"with --backend={self.backend}",
                              "--backend=horovod (elastic training is Horovod's)",
                              "drop --elastic, or pass --backend=horovod")
        if not 1024 <= self.mwms_port_base <= 65000:
            raise usage_error("--mwms_port_base", self.mwms_port_base, "a port in 1024..65000",
                              "pass --mwms_port_base=12345")
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) < 0:
                raise usage_error(f"--{name}", getattr(self, name), "0 (automatic) or a positive count",
                                  f"pass --{name}=0")


@dataclasses.dataclass(frozen=True)
class ObserveConfig:
    """What the chief records about where the time goes (docs/observability.md)."""
    run_dir: str | None = None  # metrics.jsonl, tb/, profile/, timeline.json, summary.json
    instrument: bool = True  # the sampled split step, TensorBoard, metrics.jsonl, NVML
    profile_steps: str = ""  # "a,b": TF profiler trace of steps a..b (1-based, inclusive)
    # Horovod's timeline at run_dir/timeline.json. Not `--timeline`: horovodrun parses the
    # whole command line and rejects that as an ambiguous abbreviation of its own
    # --timeline-filename / --timeline-mark-cycles, even after the training command.
    horovod_timeline: bool = False
    progress: str = "auto"  # auto = a bar only on an interactive terminal outside CI
    baseline_samples_per_sec: float = 0.0  # one rank's figure; 0 = look it up in the cache
    # Single-rank figures of earlier runs, keyed by config (observe/baseline.py); "" = off.
    baseline_cache: str = "~/.cache/horovod_train/baselines.json"

    def __post_init__(self):
        check_choice("--progress", self.progress, PROGRESS_MODES)
        check_range("--baseline_samples_per_sec", self.baseline_samples_per_sec, 0.0,
                    expected="0 (look up a stored figure) or one rank's finite samples/s",
                    fix="pass the samples/s of a 1-rank run of the same config, or 0")
        self.profile_window()  # validates
        for flag, wanted in (("--horovod_timeline", self.horovod_timeline), ("--profile_steps", self.profile_steps)):
            if wanted and not self.run_dir:
                raise usage_error(flag, wanted, "a --run_dir to write into",
                                  f"add --run_dir=DIR (e.g. runs/mine) or drop {flag}")

    def profile_window(self) -> tuple[int, int] | None:
        """(first, last) step of the profiler trace, or None."""
        if not self.profile_steps:
            return None
        first, _, last = str(self.profile_steps).partition(",")
        if not (first.strip().isdigit() and last.strip().isdigit()) or \
                not 1 <= int(first) <= int(last):
            raise usage_error("--profile_steps", self.profile_steps,
                              "FIRST,LAST with 1 <= FIRST <= LAST, e.g. 20,25",
                              "pass --profile_steps=20,25 (a few steps after warm-up)")
        return int(first), int(last)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    model: str = "digits_cnn"
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    speed: SpeedConfig = SpeedConfig()
    observe: ObserveConfig = ObserveConfig()
    summary_json: str | None = None  # default: run_dir/summary.json when --run_dir is set
    export_weights: str | None = None  # .npz of the final model weights (chief only)

    def __post_init__(self):
        # Names are checked here, against TF-free registries, so a typo fails before
        # TensorFlow is even imported.
        import models  # the registry is TF-free
        from horovod_train.data import available_datasets
        check_choice("--model", self.model, models.available_models())
        check_choice("--dataset", self.data.dataset, available_datasets())
        if self.speed.jit_compile == "true" and self.runtime.deterministic:
            raise usage_error("--jit_compile", "true with --deterministic",
                              "one of the two: XLA has no deterministic kernels for some ops "
                              "(TF: 'MaxPool gradient ops do not yet have a deterministic XLA "
                              "implementation')",
                              "drop --deterministic, or pass --jit_compile=auto or false")
        if self.runtime.elastic and self.train.checkpoint_dir:
            raise usage_error("--elastic", f"with --checkpoint_dir={self.train.checkpoint_dir}",
                              "one of the two: elastic runs keep their state in memory "
                              "(commits), and step-numbered checkpoints assume a fixed world size",
                              "drop --checkpoint_dir, or drop --elastic")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary_path(self) -> str | None:
        if self.summary_json:
            return self.summary_json
        return os.path.join(self.observe.run_dir, "summary.json") if self.observe.run_dir else None
