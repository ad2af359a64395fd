"""The multi-rank scenarios shared across this directory's files (tests/scenarios.py has
their flags): each job runs once per session and every test that reads it asserts its own
facts on its outputs. They live here because a fixture imported into two modules would
run twice."""
import pytest

from ranks import horovodrun, run_ranks
from scenarios import MPI_XLA, REFERENCE, Job


@pytest.fixture(scope="session")
def gloo_reference(tmp_path_factory) -> Job:
    """REFERENCE on 2 ranks under horovodrun --gloo."""
    pytest.importorskip("horovod.tensorflow")
    run_dir = tmp_path_factory.mktemp("gloo_reference")
    return Job(run_ranks(horovodrun(2, "gloo", REFERENCE), run_dir), run_dir)


@pytest.fixture(scope="session")
def mpi_xla(tmp_path_factory) -> Job:
    """MPI_XLA on 2 ranks under horovodrun --mpi."""
    pytest.importorskip("horovod.tensorflow")
    run_dir = tmp_path_factory.mktemp("mpi_xla")
    return Job(run_ranks(horovodrun(2, "mpi", MPI_XLA), run_dir), run_dir)
