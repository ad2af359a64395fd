"""Frozen, validated run configuration. TF-free.

Every option is a field here, named once: its name is the flag's name, its type the
flag's type, its default the flag's default, and its help text sits on the field
(`option(...)`); horovod_train.flags generates the absl flags and the RunConfig from
these fields. Everything below the CLI takes a RunConfig and never reads flags or
os.environ for settings. Validation happens in __post_init__ so a bad config cannot
exist, whichever way it was built.
"""
import dataclasses
import os

import models  # the zoo's registry is TF-free: its names are --model's choices
from horovod_train.data import available_datasets  # TF-free, like the zoo's
from horovod_train.errors import check_choice, check_positive, check_range, usage_error
from horovod_train.observe import profiler as profiler_lib  # TF-free: the flags' rules
from launch import contract

# Gradient buckets (backends/buckets.py): a few per ResNet-18 (44 MiB of gradients), so
# the first ones travel while backprop runs; small models fit in one.
DEFAULT_BUCKET_MB = 4.0
# Where --inject_delay can slow a rank: the phases without collectives in them, and a
# step before its collectives (a straggler, or with SECONDS past --collective_timeout_s,
# a stalled rank).
DELAY_PHASES = ("eval", "checkpoint", "step")


def option(default, help: str, *, choices: tuple | None = None):  # noqa: A002 - absl's word
    """A config field that is also a command-line flag: `help` is its --help text;
    `choices` makes it a fixed-choice flag (listed in --help, checked in __post_init__)."""
    metadata = {"help": help}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


def check_field_choices(config) -> None:
    """The fixed-choice fields of a config dataclass, each against its own list."""
    for field in dataclasses.fields(config):
        choices = field.metadata.get("choices")
        if choices is not None:
            check_choice(f"--{field.name}", getattr(config, field.name), choices)


@dataclasses.dataclass(frozen=True)
class SpeedConfig:
    """The levers: precision, accumulation, recomputation, compression."""
    precision: str = option("fp32", "Mixed precision: mixed_float16 adds dynamic loss scaling; "
                            "logits and loss stay float32.", choices=contract.PRECISIONS)
    grad_accum_steps: int = option(1, "Micro-batches of --batch_size per optimizer step "
                                   "(one allreduce per step).")
    gradient_checkpointing: bool = option(False, "Recompute each model block's activations in "
                                          "the backward pass.")
    compression: str = option("none", "Gradients on the wire.", choices=contract.COMPRESSIONS)
    allreduce_bucket_mb: float | None = option(
        None, "Gradients are reduced in buckets of about this many MiB, last layers first, "
        "each sent as soon as backprop has produced it (overlapping the backward pass); 0 = "
        f"one grouped allreduce after it. Unset: {DEFAULT_BUCKET_MB:g}, except 0 under Gloo "
        "when ranks share a CPU host's cores (there the buckets' transport competes with "
        "backprop for each rank's core).")
    shard_optimizer_state: bool = option(
        False, "ZeRO stage 1: each rank keeps the optimizer's state (Adam's moments) for 1/N of "
        "the parameters; gradients reduce-scattered, parameters allgathered (one allreduce).")
    max_nonfinite_steps: int = option(20, "Stop after this many consecutive steps with "
                                      "non-finite gradients.")
    inject_nonfinite: str = option("", "Fault injection: STEP@RANK makes that rank's gradients "
                                   "inf at that step.")
    jit_compile: str = option(  # resolve_jit_compile says when auto is on
        "auto", "XLA-compile the forward/backward pass and the optimizer update (never the "
        "collectives). auto = on with a GPU, off on CPU.", choices=contract.JIT_MODES)

    def __post_init__(self):
        check_field_choices(self)
        if not isinstance(self.grad_accum_steps, int) or self.grad_accum_steps < 1:
            raise usage_error("--grad_accum_steps", self.grad_accum_steps, "an integer >= 1",
                              "pass --grad_accum_steps=1 (no accumulation) or more")
        check_positive("--max_nonfinite_steps", self.max_nonfinite_steps)
        if self.allreduce_bucket_mb is not None:  # None: the backend's rule decides
            check_range("--allreduce_bucket_mb", self.allreduce_bucket_mb, 0.0,
                        expected="0 (one grouped allreduce) or a finite positive number of MiB",
                        fix=f"pass --allreduce_bucket_mb={DEFAULT_BUCKET_MB:g}, or leave it unset")
        if self.inject_nonfinite:
            self.injection()  # validates
        if self.shard_optimizer_state and self.compression != "none":
            raise usage_error("--compression", f"{self.compression} with --shard_optimizer_state",
                              "--compression=none (sharded gradients travel in float32)",
                              "drop --compression, or drop --shard_optimizer_state")

    def injection(self) -> tuple | None:
        if not self.inject_nonfinite:
            return None
        step, _, rank = self.inject_nonfinite.partition("@")
        if not (step.isdigit() and rank.isdigit()):
            raise usage_error("--inject_nonfinite", self.inject_nonfinite, "STEP@RANK, e.g. 5@1",
                              "pass --inject_nonfinite=5@1 or leave it empty")
        return int(step), int(rank)


def _parse_delay(item: str) -> tuple:
    phase, _, rest = item.partition(":")
    seconds, _, rank = rest.partition("@")
    try:
        parsed = (phase, float(seconds), int(rank))
    except ValueError:
        parsed = None
    if parsed is None or phase not in DELAY_PHASES or not 0 <= parsed[1] < 3600:
        raise usage_error("--inject_delay", item,
                          f"PHASE:SECONDS@RANK with PHASE one of {', '.join(DELAY_PHASES)}, "
                          f"e.g. eval:20@1", "pass --inject_delay=eval:20@1 or leave it empty")
    return parsed


def injected_delay(delays, phase: str, rank: int) -> float:
    """Seconds --inject_delay adds to `phase` on `rank`."""
    return sum(seconds for p, seconds, r in delays if (p, r) == (phase, rank))


def resolve_jit_compile(requested: str, visible_gpus: int, deterministic: bool = False) -> bool:
    """--jit_compile and the GPUs this rank sees -> whether the step's compute is XLA.

    auto follows Keras's own default: on with a GPU, where fusing the step's many small
    kernels is what XLA is for; off on CPU, where it measured slower (bench/xla.py: 1.3x
    to 2x the step time on 2 cores) and every new input shape costs a compile; off under
    op determinism, for which XLA lacks kernels (see RunConfig)."""
    check_choice("--jit_compile", requested, contract.JIT_MODES)
    if requested == "auto":
        return visible_gpus > 0 and not deterministic
    return requested == "true"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    dataset: str = option("digits", "Data source: digits is bundled, synthetic is generated; "
                          "tfrecord and lmdb read --data_dir, tfds --tfds_name, pycorpus "
                          "Python's own library.", choices=available_datasets())
    data_dir: str | None = option(None, "Directory holding the dataset files (TFDS: its data_dir).")
    batch_size: int = option(32, "Per-replica batch size; the global batch is batch_size x ranks.")
    data_threads: int = option(0, "tf.data threads; 0 = autotune.")
    # File-backed sources and pipeline knobs (rules in horovod_train/data/options.py).
    tfds_name: str | None = option(None, "TFDS builder name for --dataset=tfds, e.g. mnist or "
                                   "mnist:3.0.1.")
    train_split: str = option("train", "Training split (TFDS: slices allowed, e.g. train[:90%]).")
    eval_split: str = option("test", "Evaluation split.")
    shuffle_buffer: int = option(0, "Shuffle buffer per worker in examples; 0 = automatic.")
    cache: str = option("", "Cache decoded examples: '' (off), 'memory', or a file prefix "
                        "for tf.data's file cache.")
    skip_corrupt: bool = option(False, "Skip unreadable records (counted and logged) instead "
                                "of failing.")
    verify_data: bool = option(True, "Read every record once at start so corruption fails "
                               "before training.")
    synthetic_shape: tuple = option((8, 8, 1), "Shape of one synthetic example, e.g. 224,224,3.")
    synthetic_examples: int = option(4096, "Number of synthetic examples (an eighth held out "
                                     "for eval).")

    def __post_init__(self):
        check_field_choices(self)
        from horovod_train.data import options  # TF-free
        object.__setattr__(self, "synthetic_shape", options.parse_shape(self.synthetic_shape))
        options.validate(self)  # --data_dir too: local paths here, URLs where data loads
        check_positive("--batch_size", self.batch_size)
        if self.data_threads < 0:
            raise usage_error("--data_threads", self.data_threads, "0 (autotune) or a positive count",
                              "pass --data_threads=0")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    optimizer: str = option("adam", "The optimizer.", choices=contract.OPTIMIZERS)
    learning_rate: float = option(0.002, "Per-replica learning rate; multiplied by the world "
                                  "size (linear scaling), reached after --warmup_epochs.")
    momentum: float = option(0.9, "SGD momentum (sgd only).")
    warmup_epochs: float = option(0.0, "Epochs of linear warmup from the per-replica to the "
                                  "scaled rate.")
    scale_lr: bool = option(True, "Scale the learning rate by world size.")

    def __post_init__(self):
        check_field_choices(self)
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
    epochs: int = option(10, "Training epochs.")
    max_steps: int = option(0, "Stop after this many optimizer steps; 0 = no cap.")
    log_every: int = option(20, "Steps per logging interval.")
    eval_every_epochs: int = option(1, "Evaluate every N epochs; 0 = only at the end.")
    eval_at_start: bool = option(False, "Also evaluate before the first step (the starting "
                                 "loss, or the just-restored model's).")
    checkpoint_dir: str | None = option(None, "Write checkpoints here (chief only) and resume "
                                        "from the newest one.")
    checkpoint_every: str = option("1e", "Checkpoint cadence: N steps, or Ne epochs (e.g. 500 "
                                   "or 1e).")
    keep_checkpoints: int = option(3, "Newest checkpoints kept.")
    checkpoint_timeout_s: float = option(600.0, "Seconds a checkpoint write may take (its size "
                                         "at 10 MB/s if longer); then every rank ends, exit 75.")
    allow_global_batch_change: bool = option(
        False, "Resume a checkpoint whose global batch (ranks x batch x accumulation) this "
        "launch cannot keep, scaling the learning rate linearly in the global batch.")
    divergence_check_steps: int = option(
        0, "Also compare a checksum of the trainable weights across ranks every N steps "
        "(always at epoch ends); ranks that differ stop the job (exit 4). 0 = epoch ends only.")

    def __post_init__(self):
        check_positive("--epochs", self.epochs)
        check_positive("--log_every", self.log_every)
        if self.max_steps < 0:
            raise usage_error("--max_steps", self.max_steps, "0 (no cap) or a positive step count",
                              "pass --max_steps=N with N > 0, or 0")
        check_positive("--keep_checkpoints", self.keep_checkpoints)
        check_positive("--checkpoint_timeout_s", self.checkpoint_timeout_s)
        self.checkpoint_interval(1)  # validates --checkpoint_every
        check_range("--divergence_check_steps", self.divergence_check_steps, 0,
                    expected="0 (epoch ends only) or a positive step count",
                    fix="pass --divergence_check_steps=0, or N > 0 to also check every N steps")
        check_range("--eval_every_epochs", self.eval_every_epochs, 0, expected="an integer >= 0",
                    fix="pass --eval_every_epochs=1")

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
    backend: str = option(
        "auto", "auto = horovod under horovodrun/mpirun/srun, mwms when only TF_CONFIG is "
        "set, else local.", choices=contract.BACKEND_CHOICES)
    seed: int = option(42, "Random seed (same on every rank).")
    intra_op_threads: int = option(0, "TF intra-op threads per rank; 0 = TF_NUM_INTRAOP_THREADS, "
                                   "else SLURM_CPUS_PER_TASK, else cores / ranks on this host.")
    inter_op_threads: int = option(0, "TF inter-op threads per rank; 0 = automatic (2 when "
                                   "ranks share cores, TF's default otherwise).")
    deterministic: bool = option(False, "Enable TF op determinism "
                                 "(tf.config.experimental.enable_op_determinism).")
    collective: str = option("auto", "mwms collectives (CommunicationImplementation): ring "
                             "(gRPC, CPUs) or nccl (GPUs).", choices=contract.COLLECTIVES)
    collective_timeout_s: float = option(
        300.0, "Seconds a rank waits for its peers in one collective before it ends the run "
        "instead of hanging (exit 75). An evaluation or the chief's checkpoint write may "
        "take longer: they run in rounds, each a collective. One process has no peers and "
        "no such bound.")
    stop_grace_s: float = option(contract.DEFAULT_STOP_GRACE_S, "On SIGTERM every rank stops at "
                                 "the next step boundary and the chief writes a checkpoint (exit "
                                 "143); after this many seconds without one, the rank ends anyway.")
    mwms_port_base: int = option(contract.DEFAULT_MWMS_PORT_BASE, "mwms: worker ports when "
                                 "TF_CONFIG is derived (base + local rank, as launch/).")
    fusion_threshold_mb: float = option(0.0, "horovod: tensor fusion buffer "
                                        "(HOROVOD_FUSION_THRESHOLD); 0 = default (128 MiB).")
    cycle_time_ms: float = option(0.0, "horovod: background cycle (HOROVOD_CYCLE_TIME); "
                                  "0 = default, or 5 on shared CPU cores.")
    hierarchical_allreduce: bool = option(False, "horovod: HOROVOD_HIERARCHICAL_ALLREDUCE "
                                          "(intra-node, then across nodes).")
    elastic: bool = option(False, "horovod: elastic training under horovodrun --min-np/--max-np "
                           "--host-discovery-script; ranks may leave and join.")
    elastic_commit_every: int = option(10, "Steps between elastic commits; at most this many "
                                       "are redone on a loss.")
    inject_delay: str = option("", "Fault injection: PHASE:SECONDS@RANK[,...] makes that "
                               f"rank's PHASE ({' or '.join(DELAY_PHASES)}) take SECONDS "
                               "longer, each time it runs.")

    def __post_init__(self):
        check_field_choices(self)
        # nan or inf would turn every bound on a stuck peer into "wait forever".
        check_positive("--collective_timeout_s", self.collective_timeout_s,
                       "pass --collective_timeout_s=300 (seconds a rank may wait for a "
                       "peer in one collective)")
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
        elastic_ok = contract.ELASTIC_BACKENDS + ("auto",)  # auto resolves to one under horovodrun
        if self.elastic and self.backend not in elastic_ok:
            raise usage_error("--elastic", f"with --backend={self.backend}",
                              f"--backend={' or '.join(contract.ELASTIC_BACKENDS)} (elastic "
                              f"training is Horovod's)",
                              f"drop --elastic, or pass --backend={contract.ELASTIC_BACKENDS[0]}")
        self.delays()  # validates
        if not 1024 <= self.mwms_port_base <= 65000:
            raise usage_error("--mwms_port_base", self.mwms_port_base, "a port in 1024..65000",
                              f"pass --mwms_port_base={contract.DEFAULT_MWMS_PORT_BASE}")
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) < 0:
                raise usage_error(f"--{name}", getattr(self, name), "0 (automatic) or a positive count",
                                  f"pass --{name}=0")

    def delays(self) -> tuple:
        """((phase, seconds, rank), ...) of --inject_delay."""
        return tuple(_parse_delay(item) for item in self.inject_delay.split(",") if item)


@dataclasses.dataclass(frozen=True)
class ObserveConfig:
    """What the chief records about where the time goes (docs/observability.md)."""
    run_dir: str | None = option(None, "Chief writes metrics.jsonl, tb/ (TensorBoard), "
                                 "profile/, timeline.json and summary.json here.")
    instrument: bool = option(True, "Measure the step breakdown (sampled split steps, "
                              "TensorBoard, metrics.jsonl, NVML) and write the run_dir records; "
                              "--noinstrument = fused steps only (benchmarks).")
    profile_steps: str = option("", "FIRST:LAST: profile these steps (1-based, inclusive) on "
                                "the --profile_ranks, into run_dir/profile.")
    profile_ranks: str = option("0", "Ranks that profile --profile_steps, e.g. 0,1.")
    profiler: str = option("auto", "py-spy (all threads, native frames; speedscope JSON), tf "
                           "(TensorFlow's trace), or auto: py-spy where installed.",
                           choices=profiler_lib.PROFILERS)
    # Not `--timeline`: horovodrun parses the whole command line and rejects that as an
    # ambiguous abbreviation of its own --timeline-filename / --timeline-mark-cycles,
    # even after the training command.
    horovod_timeline: bool = option(False, "horovod: write Horovod's timeline to "
                                    "run_dir/timeline.json.")
    progress: str = option("auto", "auto = a bar with ETA on an interactive terminal (not "
                           "under CI), plain lines otherwise.", choices=contract.PROGRESS_MODES)
    baseline_samples_per_sec: float = option(0.0, "One rank's samples/s for scaling efficiency; "
                                             "0 = a stored 1-rank figure of the same config, "
                                             "if any.")
    # Keyed by config (observe/baseline.py).
    baseline_cache: str = option("~/.cache/horovod_train/baselines.json",
                                 "JSON file of stored 1-rank figures (read and written with "
                                 "--run_dir); '' = off.")

    def __post_init__(self):
        check_field_choices(self)
        check_range("--baseline_samples_per_sec", self.baseline_samples_per_sec, 0.0,
                    expected="0 (look up a stored figure) or one rank's finite samples/s",
                    fix="pass the samples/s of a 1-rank run of the same config, or 0")
        self.profile_window()  # validates
        for flag, wanted in (("--horovod_timeline", self.horovod_timeline), ("--profile_steps", self.profile_steps)):
            if wanted and not self.run_dir:
                raise usage_error(flag, wanted, "a --run_dir to write into",
                                  f"add --run_dir=DIR (e.g. runs/mine) or drop {flag}")

    def profile_window(self) -> tuple[int, int] | None:
        """(first, last) step of the profile, or None (observe/profiler.py)."""
        profiler_lib.parse_ranks(self.profile_ranks)  # validates
        return profiler_lib.parse_window(self.profile_steps)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The whole run. Fields that are config dataclasses are sections (no flag of their
    own); every other field, here or in a section, is one flag of the same name."""
    model: str = option("digits_cnn", "The model, from the zoo (models/).",
                        choices=models.available_models())
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    speed: SpeedConfig = SpeedConfig()
    observe: ObserveConfig = ObserveConfig()
    summary_json: str | None = option(None, "Write the run summary here (chief only); default: "
                                      "run_dir/summary.json when --run_dir is set.")
    export_weights: str | None = option(None, "Write the final model weights here as .npz "
                                        "(chief only).")

    def __post_init__(self):
        # Names are checked here, against TF-free registries, so a typo fails before
        # TensorFlow is even imported.
        check_field_choices(self)
        if self.speed.jit_compile == "true" and self.runtime.deterministic:
            raise usage_error("--jit_compile", "true with --deterministic",
                              "one of the two: XLA has no deterministic kernels for some ops "
                              "(TF: 'MaxPool gradient ops do not yet have a deterministic XLA "
                              "implementation')",
                              "drop --deterministic, or pass --jit_compile=auto or false")
        if self.runtime.elastic and self.speed.shard_optimizer_state:
            raise usage_error("--elastic", "with --shard_optimizer_state", "one of the two: an "
                              "elastic ring re-forms at another size, and the optimizer's shards "
                              "are cut for one world size", "drop --shard_optimizer_state, or "
                              "drop --elastic")
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
