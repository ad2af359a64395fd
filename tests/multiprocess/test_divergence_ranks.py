"""The divergence guard with real ranks (horovodrun --gloo, mpirun).

A sitecustomize hook (no change to the package) adds 1e-3 to one kernel on rank 1 only,
after step K: from then on the ranks hold different models, which nothing else would
notice (both keep applying the same reduced gradients). The next check (the epoch's
end, or the next --divergence_check_steps point) must stop every rank with exit 4 and
one line naming rank 1. A healthy run checks and goes on.

digits: 1437 training examples, batch 32 x 2 ranks = 22 steps per epoch.
"""
import re
import subprocess
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import horovodrun, mpirun, rank1_trainer_hook
from scenarios import DIVERGENCE as FLAGS
from scenarios import HEALTHY, PER_EPOCH, check_injected_skip

pytest.importorskip("horovod.tensorflow")

PERTURB_AFTER = 5  # steps
LAUNCHERS = {
    "horovodrun-gloo": lambda flags: horovodrun(2, "gloo", flags),
    "mpirun": lambda flags: mpirun(2, flags),
}
# The one line each rank prints as it leaves (horovodrun prefixes it with the rank).
LINE = re.compile(r"horovod_train: stopped: ranks diverged: rank 1 .*")


def _perturb_rank_1(tmp_path) -> str:
    """PYTHONPATH with a sitecustomize that, on rank 1 only, adds 1e-3 to the model's
    first trainable kernel right after step PERTURB_AFTER."""
    return rank1_trainer_hook(tmp_path, f"""
                original = trainer.Trainer._one_step
                def perturbed(self, batch_iter):
                    original(self, batch_iter)
                    if self.global_step == {PERTURB_AFTER}:
                        kernel = self.model.trainable_variables[0]
                        kernel.assign(kernel + 1e-3)
                trainer.Trainer._one_step = perturbed
    """)


def _run_perturbed(tmp_path, launcher, extra=()):
    proc = run_cli(LAUNCHERS[launcher](FLAGS + list(extra)), timeout=300,
                   env=child_env(PYTHONPATH=_perturb_rank_1(tmp_path)))
    return proc, proc.stdout + proc.stderr


def _ranks_output(out, launcher) -> str:
    """What the ranks printed: horovodrun --gloo prefixes their lines with [rank] (its
    own traceback, when a rank fails, is not theirs); mpirun passes them on bare."""
    if launcher != "horovodrun-gloo":
        return out
    return "\n".join(line for line in out.splitlines() if re.match(r"\[\d+\]<std", line))


def _assert_exit_4(proc, out, launcher):
    if launcher == "horovodrun-gloo":  # exits 1 for any failed rank, naming the rank's code
        assert proc.returncode == 1 and re.search(r"Exit code:\s+4\b", out), out[-3000:]
    else:  # mpirun passes the first failing rank's code through
        assert proc.returncode == 4, out[-3000:]
    ranks = _ranks_output(out, launcher)
    assert "Traceback" not in ranks and "peer rank was lost" not in ranks, ranks[-3000:]


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_rank_whose_weights_change_stops_the_job_at_the_next_epoch_end(tmp_path, launcher):
    proc, out = _run_perturbed(tmp_path, launcher)
    _assert_exit_4(proc, out, launcher)
    lines = LINE.findall(proc.stderr)
    assert lines, out[-3000:]
    # One line per rank that got to print it (a launcher may end the other first).
    assert len(lines) <= 2 and all(line.count("ranks diverged") == 1 for line in lines), lines
    assert all(f"at step {PER_EPOCH}, checked at epoch 1 end" in line for line in lines), lines
    assert f"train | step {2 * PER_EPOCH}/" not in out  # no rank trained on
    print(f"\n[divergence] {launcher}: rank 1 perturbed after step {PERTURB_AFTER} -> "
          f"exit {proc.returncode}: {lines[0]}")


def test_with_an_interval_the_next_interval_check_stops_the_job(tmp_path):
    proc, out = _run_perturbed(tmp_path, "horovodrun-gloo", ["--divergence_check_steps=4"])
    _assert_exit_4(proc, out, "horovodrun-gloo")
    lines = LINE.findall(proc.stderr)
    assert lines and all("at step 8, checked at step 8 (--divergence_check_steps=4)" in line
                         for line in lines), out[-3000:]


def test_a_healthy_run_checks_and_trains_on_and_an_agreed_skip_is_healthy(gloo_trainers):
    """Checks every 10 steps and at the epoch end, and trains on. The same run has rank 1
    alone see inf at step 5 under fp16 loss scaling (what
    test_speed_levers' horovod inject test asserted on a run of its own): every rank skips
    that step together, and the skip does not look like divergence. One epoch and 3 steps
    of the next (fp16 steps are slow on CPU): every kind of check, an interval, the epoch
    end and the last step, is passed, and training goes on after each. A gloo_trainers
    job (tests/scenarios.py)."""
    job = gloo_trainers.trainer_run("divergence_healthy")
    # Every 10 steps, the first epoch end and the last step: 10, 20, 22, 25.
    assert job.summary["steps"] == HEALTHY and job.summary["divergence_checks"] == 4
    check_injected_skip(job.summary, job.run_dir, steps=HEALTHY)


CHECKSUM = """
import sys
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
from horovod_train import divergence
# ResNet-18-sized kernels and a few odd sizes, the same values in every process.
shapes = [[3, 3, 512, 512], [3, 3, 256, 256], [2_000_003], [1000, 10], [7]]
weights = [tf.random.stateless_normal(s, seed=[i, 1]) for i, s in enumerate(shapes)]
print(divergence.checksum(weights).numpy().tobytes().hex())
print(tf.function(divergence.checksum)(weights).numpy().tobytes().hex())
"""


def test_the_checksum_does_not_depend_on_the_number_of_threads():
    """Ranks on hosts with other core counts run other intra-op thread counts; a plain
    reduce_sum splits its work by thread count and rounds differently, which would stop
    a healthy job. Eager and traced (as check() and the Keras step run it) alike."""
    # The three processes at once: each is mostly TensorFlow's start-up.
    procs = {threads: subprocess.Popen([sys.executable, "-c", CHECKSUM, str(threads)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       cwd=ROOT, env=child_env())
             for threads in (1, 3, 8)}
    outs = {}
    for threads, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        outs[threads] = out.split()
    assert len({bits for both in outs.values() for bits in both}) == 1, outs
