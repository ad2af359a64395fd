"""Multi-rank scenarios: the flag sets of the jobs several tests share, and what a finished
job is (a plain module; the session fixtures that run them are in
tests/multiprocess/conftest.py). docs/testing.md says when a test joins a scenario and when
it needs a launch of its own."""
import dataclasses
import pathlib

import numpy as np

from ranks import assert_ranks_identical, load_weights

# The deterministic SGD reference on 2 Gloo ranks: 2 x 16 examples a step, no bucket flag
# (so under Gloo on shared CPU cores: one grouped allreduce after backprop). Tests of data
# parallelism, accumulation, buckets, compression and the MWMS backend compare against it;
# each of their own runs changes only the lever it tests.
REFERENCE = ["--optimizer=sgd", "--momentum=0.9", "--learning_rate=0.05", "--deterministic",
             "--eval_every_epochs=0", "--batch_size=16", "--max_steps=40", "--log_every=10"]
REFERENCE_STEPS = 40

# A short job, and rank 1 alone seeing inf at step 5 under fp16 loss scaling.
SHORT = ["--max_steps=12", "--log_every=6", "--eval_every_epochs=0"]
INJECT = ["--precision=mixed_float16", "--inject_nonfinite=5@1"]


# digits_cnn's 0.6 MiB of gradients in 3 buckets.
BUCKETS = "--allreduce_bucket_mb=0.05"
SHARD = "--shard_optimizer_state"
ADAM = SHORT + ["--optimizer=adam", "--deterministic", "--batch_size=16"]
# digits on 2 ranks of 32: 22 steps an epoch.
PER_EPOCH = 1437 // (32 * 2)
# The divergence guard's runs (test_divergence_ranks.py); the healthy one goes past the
# first epoch end.
DIVERGENCE = ["--epochs=3", "--log_every=10", "--eval_every_epochs=0", "--intra_op_threads=1",
              "--collective_timeout_s=60"]
HEALTHY = PER_EPOCH + 3
# The default job but for its length, with the fp16 poisoned step, under XLA.
XLA_INJECT = ["--jit_compile=true", "--epochs=3", "--log_every=10"] + INJECT


@dataclasses.dataclass(frozen=True)
class Job:
    """A finished job: its summary (with the chief's stderr as "_stderr") and run dir."""
    summary: dict
    run_dir: pathlib.Path

    def weights(self) -> list:
        return load_weights(self.run_dir)


def reference_with(*changes: str) -> list:
    """REFERENCE with some flags replaced (same name) or added."""
    names = {c.split("=", 1)[0] for c in changes}
    return [f for f in REFERENCE if f.split("=", 1)[0] not in names] + list(changes)


# The training runs on 2 Gloo ranks that tests read only the results of (summary, weights,
# config lines): one rank session runs them all in one launch (tests/multiprocess/conftest.py,
# gloo_trainers). name -> flags; the readers named.
GLOO_TRAINER_RUNS = {
    "reference": REFERENCE,  # gloo_reference: speed levers, shards, MWMS, 1 rank
    # test_speed_levers.py: each changes only the lever it tests
    **{f"k{k}": reference_with(f"--grad_accum_steps={k}", f"--batch_size={16 // k}")
       for k in (2, 4)},
    "buckets": reference_with(BUCKETS),
    "buckets_k2": reference_with(BUCKETS, "--grad_accum_steps=2", "--batch_size=8"),
    **{f"compression_{c}": ["--epochs=3", "--log_every=10", f"--compression={c}"]
       for c in ("fp16", "bf16")},
    # test_optimizer_shards.py
    "sharded_sgd": reference_with(SHARD, BUCKETS, "--grad_accum_steps=2", "--batch_size=8"),
    "adam_plain": ADAM + INJECT,
    "adam_sharded": ADAM + INJECT + [SHARD],
    "default": [],  # test_horovod_ranks.py: every flag at its default
    # test_divergence_ranks.py: checks at an interval, an epoch end and the last step
    "divergence_healthy": DIVERGENCE + ["--epochs=2", f"--max_steps={HEALTHY}",
                                        "--divergence_check_steps=10"] + INJECT,
    "xla_inject": XLA_INJECT,  # test_xla_ranks.py
}


# Horovod-style scripts (tests/multiprocess/horovod_style/, test_horovod_style_scripts.py):
# the digits script's epochs; each rank writes its result file where {rank} is its rank.
STYLE_EPOCHS = 5


def style_result(out: str) -> str:
    return f"--result={out}/result-{{rank}}.json"


# examples/keras_fit.py (test_keras_fit.py): (launcher, extra flags, injected CALL@RANK or
# None, checkpoint?). compile(jit_compile=True): XLA around the collectives (keras_jit.py).
# Were the allreduce inside the XLA step, these would fail: XLA on CPU compiles neither
# Horovod's ops nor TF's collectives. One run per launcher: Gloo without XLA (auto: off on
# CPU), MPI and MWMS with XLA and fp16. fp16 only under XLA: TensorFlow's own fp16
# convolutions on CPU took this run from 24 s to 117 s (5 epochs, MPI), and 190 s a epoch
# on a loaded host; the agreed skip without XLA is the rank session's keras_accumulation
# job (a dense model, test_accumulation_over_ranks...).
KERAS_FIT_CASES = {
    "horovodrun-gloo": ("gloo", [], None, True),
    "horovodrun-mpi-xla": ("mpi", ["--jit_compile=true", "--precision=mixed_float16"], "5@1",
                           False),
    "mwms-workers-xla": ("mwms", ["--jit_compile=true", "--precision=mixed_float16"], "7@0", True),
}


def keras_fit_args(case: str, out: str) -> list:
    """examples/keras_fit.py's argv for `case`, its summary in `out`; a rank writes its
    checkpoint (a relative path) in the directory it runs in."""
    _, extra, inject, checkpoint = KERAS_FIT_CASES[case]
    args = ["--epochs=5", "--intra_op=1", *extra, f"--summary_json={out}/summary.json"]
    args += [f"--inject_nonfinite={inject}"] if inject else []
    return args + (["--checkpoint=ckpt.keras"] if checkpoint else [])


def assert_same_weights(a: list, b: list, rtol=1e-4, atol=2e-5):
    """Two runs' weights equal to float32 rounding (their reduction orders differ)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def check_injected_skip(summary, run_dir, steps: int = 12):
    """What INJECT leaves: rank 1 alone saw inf, and the agreed verdict made BOTH skip
    (else the ranks' digests would differ)."""
    assert summary["skipped_steps"] == 1
    assert summary["loss_scale"] == 2.0 ** 14  # halved once from 2**15
    assert summary["steps"] == steps
    assert_ranks_identical(summary, run_dir, 2)

# The MPI job: 3 epochs of the default job under horovodrun --mpi, with XLA around the
# collectives; it reaches the default job's accuracy bar (0.95) in 3 of its 10 epochs.
MPI_XLA = ["--epochs=3", "--log_every=10", "--jit_compile=true"]


def check_compiled_around_collectives(summary):
    """XLA compiled the step's compute, and no collective sits inside an XLA function
    (XLA on CPU would refuse to run it)."""
    assert summary["jit_compile"] is True
    assert summary["collective_ops_per_step"] >= 1 and summary["collective_ops_in_xla"] == 0
    assert summary["xla_compiled_functions"] >= 2  # the gradients and the update, at least
