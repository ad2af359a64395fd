"""Real ranks under horovodrun (gloo and mpi) and mpirun: identical weights everywhere,
data-parallel equivalence with a 1-rank run, and the default job's accuracy."""
import pytest

from ranks import (TRAIN, assert_loss_fell, assert_ranks_identical, load_weights,
                   mpirun, only_chief_files, run_ranks)
from scenarios import REFERENCE_STEPS, assert_same_weights, reference_with

pytest.importorskip("horovod.tensorflow")


def test_default_job_under_horovodrun_gloo_reaches_095(gloo_trainers):
    """The default job, every flag at its default, on 2 ranks under Gloo (a gloo_trainers
    job; `make train` runs the same job in a launch of its own under horovodrun's default
    controller, MPI here: test_console_ranks)."""
    job = gloo_trainers.trainer_run("default")
    summary = job.summary
    assert summary["backend"] == "horovod" and summary["global_batch"] == 64
    assert summary["test_accuracy"] >= 0.95
    assert_ranks_identical(summary, job.run_dir, 2)
    assert_loss_fell(summary)
    only_chief_files(job.run_dir)


def test_ranks_end_identical_under_horovodrun_mpi(mpi_xla):
    """The shared MPI job (3 epochs, XLA: test_xla_ranks reads it too). No
    --allreduce_bucket_mb: 2 CPU ranks on one host under MPI reduce in 4 MiB buckets, said
    on the config line (under Gloo, one call after backprop: test_speed_levers)."""
    summary = mpi_xla.summary
    assert summary["world_size"] == 2 and summary["backend"] == "horovod"
    assert_ranks_identical(summary, mpi_xla.run_dir, 2)
    assert_loss_fell(summary)
    assert summary["test_accuracy"] >= 0.9
    only_chief_files(mpi_xla.run_dir)
    assert "backend horovod 0.28.1 patched " in summary["_stderr"]
    assert " (compression none, gradient buckets of 4 MiB" in summary["_stderr"]
    assert summary["config"]["speed"]["allreduce_bucket_mb"] is None
    assert summary["collective_ops_per_step"] == 1  # digits_cnn's 0.6 MiB: one bucket


def test_ranks_end_identical_under_mpirun(tmp_path):
    summary = run_ranks(mpirun(2, ["--epochs=3", "--log_every=10"]), tmp_path)
    assert summary["world_size"] == 2 and summary["backend"] == "horovod"
    assert_ranks_identical(summary, tmp_path, 2)
    assert_loss_fell(summary)
    assert summary["test_accuracy"] >= 0.9
    only_chief_files(tmp_path)


def test_two_ranks_equal_one_rank_with_the_same_global_batch(tmp_path, gloo_reference):
    """Data-parallel equivalence: 2 x 16 with averaged gradients (the shared Gloo reference)
    == 1 x 32 on one process."""
    # --learning_rate is per rank: scaled by the world size (2 x 0.05 = 1 x 0.1).
    one = run_ranks(TRAIN + reference_with("--backend=local", "--batch_size=32",
                                           "--learning_rate=0.1"), tmp_path)
    two = gloo_reference.summary
    assert two["steps"] == one["steps"] == REFERENCE_STEPS
    assert two["global_batch"] == one["global_batch"] == 32
    assert_same_weights(gloo_reference.weights(), load_weights(tmp_path), atol=1e-5)
    # Not trivially equal: training moved the weights a long way from their start.
    assert_loss_fell(two)
