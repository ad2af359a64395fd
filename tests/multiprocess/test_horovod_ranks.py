"""Real ranks under horovodrun (gloo and mpi) and mpirun: identical weights everywhere,
data-parallel equivalence with a 1-rank run, and the default job's accuracy."""
import numpy as np
import pytest

from ranks import (TRAIN, assert_loss_fell, assert_ranks_identical, horovodrun, load_weights,
                   mpirun, only_chief_files, run_ranks)

pytestmark = pytest.mark.slow
pytest.importorskip("horovod.tensorflow")


def test_default_job_under_horovodrun_gloo_reaches_095(tmp_path):
    """`make train` exactly: defaults, 2 ranks, gloo."""
    summary = run_ranks(horovodrun(2, "gloo", []), tmp_path)
    assert summary["backend"] == "horovod" and summary["global_batch"] == 64
    assert summary["test_accuracy"] >= 0.95
    assert_ranks_identical(summary, tmp_path, 2)
    assert_loss_fell(summary)
    only_chief_files(tmp_path)


@pytest.mark.parametrize("launcher", ["horovodrun-mpi", "mpirun"])
def test_ranks_end_identical_under_mpi(tmp_path, launcher):
    args = ["--epochs=3", "--log_every=10"]
    argv = horovodrun(2, "mpi", args) if launcher == "horovodrun-mpi" else mpirun(2, args)
    summary = run_ranks(argv, tmp_path)
    assert summary["world_size"] == 2 and summary["backend"] == "horovod"
    assert_ranks_identical(summary, tmp_path, 2)
    assert_loss_fell(summary)
    assert summary["test_accuracy"] >= 0.9
    only_chief_files(tmp_path)


def test_two_ranks_equal_one_rank_with_the_same_global_batch(tmp_path):
    """Data-parallel equivalence: 2 x 16 with averaged gradients == 1 x 32."""
    common = ["--optimizer=sgd", "--momentum=0.9", "--max_steps=40", "--log_every=10",
              "--eval_every_epochs=0", "--deterministic"]
    two = run_ranks(horovodrun(2, "gloo", common + ["--batch_size=16", "--learning_rate=0.05"]),
                    tmp_path / "two")
    one = run_ranks(TRAIN + common + ["--backend=local", "--batch_size=32", "--learning_rate=0.1"],
                    tmp_path / "one")
    assert two["steps"] == one["steps"] == 40
    assert two["global_batch"] == one["global_batch"] == 32
    for a, b in zip(load_weights(tmp_path / "two"), load_weights(tmp_path / "one")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # Not trivially equal: training moved the weights a long way from their start.
    assert_loss_fell(two)
