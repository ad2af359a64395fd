"""--jit_compile=true on real ranks (CPU): XLA compiles each rank's gradients and update,
the collectives run between them. Under horovodrun --gloo and --mpi and as two MWMS
workers: the default job's accuracy in 3 epochs, identical weights, and (Gloo, MWMS) an
fp16 step that rank 1 alone finds non-finite, skipped by every rank together, in the same
run. Each summary also reports what the step's graph holds."""
import pytest

from ranks import assert_ranks_identical, only_chief_files, run_workers
from scenarios import (PER_EPOCH, XLA_INJECT, check_compiled_around_collectives,
                       check_injected_skip)




def _check(summary, run_dir, backend):
    assert summary["world_size"] == 2 and summary["backend"] == backend
    check_compiled_around_collectives(summary)
    assert summary["test_accuracy"] >= 0.95
    check_injected_skip(summary, run_dir, steps=3 * PER_EPOCH)
    only_chief_files(run_dir)


def test_gloo_ranks_under_xla_train_identically_and_skip_together(gloo_trainers):
    """A gloo_trainers job (tests/scenarios.py), the session's last."""
    job = gloo_trainers.trainer_run("xla_inject")
    _check(job.summary, job.run_dir, "horovod")


def test_mwms_workers_under_xla_train_identically_and_skip_together(tmp_path):
    summary, _ = run_workers(XLA_INJECT, tmp_path)
    _check(summary, tmp_path, "mwms")


def test_mpi_ranks_under_xla_reach_095_on_identical_ranks(mpi_xla):
    """The shared MPI job (test_horovod_ranks reads it too)."""
    summary = mpi_xla.summary
    assert summary["world_size"] == 2 and summary["backend"] == "horovod"
    check_compiled_around_collectives(summary)
    assert summary["test_accuracy"] >= 0.95
    assert_ranks_identical(summary, mpi_xla.run_dir, 2)
    only_chief_files(mpi_xla.run_dir)
