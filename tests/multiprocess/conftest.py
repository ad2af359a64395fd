"""The multi-rank scenarios shared across this directory's files (tests/scenarios.py has
their flags): each job runs once per session and every test that reads it asserts its own
facts on its outputs. They live here because a fixture imported into two modules would
run twice.

The rank sessions (rank_session.py): one launch per launcher runs, in the same rank
processes, every worker script that needs ranks but no launch of its own; each test
reads its job's output dir (RankSession.job_dir) and fails with the job's own traceback
if the job did not finish. A test asks for its session fixture by name (not through
request.getfixturevalue), so tests/worker_groups.py keeps every reader of a session in
one pytest-xdist worker and the launch runs once."""
import os
import sys

import pytest

from helpers import ROOT
from rank_session_launch import OUT, RankSession, SessionJob, start_session, trainer_job
from ranks import free_ports, horovodrun, horovodrun_launcher, run_ranks
from scenarios import (GLOO_TRAINER_RUNS, MPI_XLA, STYLE_EPOCHS, Job, keras_fit_args,
                       style_result)


@pytest.fixture(scope="session")
def gloo_trainers(tmp_path_factory) -> RankSession:
    """GLOO_TRAINER_RUNS (tests/scenarios.py) under horovodrun --gloo -np 2, one after
    another in the same two rank processes, each as a fresh process would start it
    (rank_session.fresh_start); a test reads its run with trainer_run(name). Each job has
    its launch's old bound (the XLA run, which compiles, twice that)."""
    pytest.importorskip("horovod.tensorflow")
    jobs = [trainer_job(name, flags, 600 if name == "xla_inject" else 300)
            for name, flags in GLOO_TRAINER_RUNS.items()]
    return start_session(tmp_path_factory.mktemp("gloo_trainers"), horovodrun_launcher(2, "gloo"),
                         jobs, True)


@pytest.fixture(scope="session")
def gloo_reference(gloo_trainers) -> Job:
    """REFERENCE on 2 ranks under horovodrun --gloo (a gloo_trainers job)."""
    return gloo_trainers.trainer_run("reference")


@pytest.fixture(scope="session")
def mpi_xla(tmp_path_factory) -> Job:
    """MPI_XLA on 2 ranks under horovodrun --mpi."""
    pytest.importorskip("horovod.tensorflow")
    run_dir = tmp_path_factory.mktemp("mpi_xla")
    return Job(run_ranks(horovodrun(2, "mpi", MPI_XLA), run_dir), run_dir)


# The jobs of each launcher's session, in order; the test file that reads each is named.
# hvd_api joins through htk.Strategy as a trainer rank does, so it comes first: the process
# gets its intra-op threads, its CPU binding and Horovod's shared-core defaults (a 5 ms
# cycle with our patches) before anything starts. The loop worker's shutdown/init rounds
# come last: nothing may use the Horovod of the earlier jobs after them.
TAPE = "horovod_style/tape_mnist_digits.py"  # test_horovod_tape_ranks.py
TAPE_ARGV = (style_result(OUT), "--check_every=4")
# test_horovod_style_scripts.py: Horovod-style Keras scripts, each rank in its own dir.
DIGITS_ARGV = (style_result(OUT), f"--epochs={STYLE_EPOCHS}", "--warmup_epochs=2")
STYLE_JOBS = {
    "gloo": (SessionJob("style_digits", "horovod_style/keras_mnist_digits.py", DIGITS_ARGV,
                        in_rank_dir=True),
             SessionJob("style_digits_no_broadcast", "horovod_style/keras_mnist_digits.py",
                        (*DIGITS_ARGV, "--no_broadcast"), in_rank_dir=True),
             SessionJob("style_benchmark", "horovod_style/keras_synthetic_benchmark.py",
                        (style_result(OUT), "--fp16_allreduce"), in_rank_dir=True)),
    "mpi": (SessionJob("style_digits", "horovod_style/keras_mnist_digits.py", DIGITS_ARGV,
                       in_rank_dir=True),
            SessionJob("style_benchmark", "horovod_style/keras_synthetic_benchmark.py",
                       (style_result(OUT),), in_rank_dir=True)),
}
# test_keras_fit.py: the user's model.fit example (its MWMS case keeps its own workers).
KERAS_FIT = os.path.join(ROOT, "examples", "keras_fit.py")
GLOO_JOBS = (
    SessionJob("hvd_api", "hvd_api_worker.py", (OUT, "api,perturb,instep,elastic"), 420),
    SessionJob("packed", "packed_worker.py", (OUT,)),  # test_packed_allreduce.py
    SessionJob("gloo_reduce", "gloo_reduce_worker.py", (OUT,)),  # test_gloo_reductions.py
    SessionJob("tape", TAPE, (*TAPE_ARGV, "--no_broadcast"), 600, in_rank_dir=True),
    # test_keras_fit.py, both
    SessionJob("keras_accumulation", "keras_accumulation_worker.py", (f"{OUT}/result.json",)),
    SessionJob("horovod_keras", "horovod_keras_worker.py", (f"{OUT}/result.json",)),
    *STYLE_JOBS["gloo"],
    SessionJob("keras_fit", KERAS_FIT, tuple(keras_fit_args("horovodrun-gloo", OUT)), 420,
               in_rank_dir=True),
    SessionJob("hvd_loop_reinit", "hvd_loop_worker.py", ("reinit", "6", OUT), 420),
)
MPI_JOBS = (
    SessionJob("hvd_api", "hvd_api_worker.py", (OUT, "api"), 420),  # test_hvd_api_ranks.py
    SessionJob("packed", "packed_worker.py", (OUT,)),
    SessionJob("tape", TAPE, TAPE_ARGV, 600, in_rank_dir=True),
    *STYLE_JOBS["mpi"],
    SessionJob("keras_fit", KERAS_FIT, tuple(keras_fit_args("horovodrun-mpi-xla", OUT)), 420,
               in_rank_dir=True),
)
# The communicator's worker first: it joins the one MWMS strategy a process may have (with
# its 90 s collective timeout and one intra-op thread); the others' hvd.init() joins it.
MWMS_JOBS = (
    SessionJob("mwms_ops", "mwms_ops_worker.py", (OUT,), 240),  # test_mwms_tensor_ops.py
    SessionJob("hvd_api", "hvd_api_worker.py", (OUT, "api"), 420),
    SessionJob("tape", TAPE, TAPE_ARGV, 600, in_rank_dir=True),
)


@pytest.fixture(scope="session")
def gloo_session(tmp_path_factory) -> RankSession:
    """GLOO_JOBS under horovodrun --gloo -np 2. The environment is the union of the jobs':
    a timeline on request (hvd_api), one intra-op thread (gloo_reduce, packed; what the
    others get on 2 cores too), a 60 s Gloo timeout (the late rank's re-init rounds); no
    job's check depends on another's variable being absent."""
    return start_session(tmp_path_factory.mktemp("gloo_session"), horovodrun_launcher(2, "gloo"),
                         GLOO_JOBS, True, HOROVOD_TIMELINE="DYNAMIC", TF_NUM_INTRAOP_THREADS=1,
                         HOROVOD_GLOO_TIMEOUT_SECONDS=60)


@pytest.fixture(scope="session")
def mpi_session(tmp_path_factory) -> RankSession:
    """MPI_JOBS under horovodrun --mpi -np 2: a timeline on request, one intra-op thread."""
    return start_session(tmp_path_factory.mktemp("mpi_session"), horovodrun_launcher(2, "mpi"),
                         MPI_JOBS, True, HOROVOD_TIMELINE="DYNAMIC", TF_NUM_INTRAOP_THREADS=1)


@pytest.fixture(scope="session")
def mwms_session(tmp_path_factory) -> RankSession:
    """MWMS_JOBS as 2 MWMS workers started by `python -m launch run --backend mwms` (the
    launcher the tape test claims works; it sets one intra-op thread), on ports free a
    moment ago."""
    launcher = [sys.executable, "-m", "launch", "run", "-H", "localhost:2", "--backend", "mwms",
                f"--mwms_port_base={free_ports(2)[0]}", "--"]
    return start_session(tmp_path_factory.mktemp("mwms_session"), launcher, MWMS_JOBS, False)
