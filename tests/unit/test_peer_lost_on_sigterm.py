"""Issue 55 item 6: a rank that gets SIGTERM after a peer on its host was killed says so.

mpirun (and plain horovodrun, which picks it) answers a rank's SIGKILL by SIGTERMing the
others and SIGKILLing them 1 s later; the job ended with 137 and mpirun's banner only.
Here, real processes carry one job's identity (a PMIx namespace and a PMIx rank, as mpirun
and srun --mpi=pmix give them) and install the real SigtermVote, then block in a C call (a read from
a pipe that never gets data: a collective waiting for a dead peer). No TensorFlow, no
launcher: what is under test is what the surviving process sees and says, from /proc."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from helpers import ROOT, child_env

# Once every rank runs (a line on stdin: training starts after all ranks joined), installs
# the vote as the trainer does, says it is ready, then waits in os.read, where the main
# thread runs no Python (the vote's own handler still runs between retries).
RANK = """
import os, sys
from horovod_train.stopping import SigtermVote
sys.stdin.readline()
SigtermVote(grace_s=float(os.environ["GRACE_S"]), rank=int(os.environ["PMIX_RANK"])).install()
print("ready", flush=True)
read_end, _ = os.pipe()
os.read(read_end, 1)
"""


def _start(*ranks, namespace: str, grace_s: float = 60) -> list[subprocess.Popen]:
    """One process per rank of one job; returns once each has installed its vote."""
    procs = [subprocess.Popen([sys.executable, "-c", RANK], cwd=ROOT, text=True,
                              env=child_env(PMIX_NAMESPACE=namespace, PMIX_RANK=rank,
                                            GRACE_S=grace_s),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for rank in ranks]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return procs


def _end(proc, timeout: float = 15) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running {timeout} s after SIGTERM; stderr:\n{err[-2000:]}")
    return proc.returncode, err, time.monotonic() - start


def test_sigterm_after_a_local_peer_was_killed_names_it_and_exits_75():
    survivor, *ranks = _start(0, 1, 2, namespace=uuid.uuid4().hex)
    try:
        os.kill(ranks[0].pid, signal.SIGKILL)
        ranks[0].wait()
        for proc in (survivor, ranks[1]):  # as mpirun does
            os.kill(proc.pid, signal.SIGTERM)
        code, err, seconds = _end(survivor)
        code_2, err_2, _ = _end(ranks[1])
    finally:
        for proc in ranks + [survivor]:
            proc.kill() if proc.poll() is None else None
    lines = [line for line in err.splitlines() if line.startswith("horovod_train: stopped:")]
    assert len(lines) == 1, err
    assert f"rank 0: SIGTERM received after rank 1 (pid {ranks[0].pid}) on this host had " \
           "ended: a peer was lost" in lines[0]
    assert "Relaunch with the same flags to resume from the newest checkpoint" in lines[0]
    assert code == 75 and seconds < 5, (code, seconds)  # before mpirun's SIGKILL, 1 s later
    # One line per host: rank 2 survives too, exits 75, and leaves the word to rank 0.
    assert code_2 == 75 and "horovod_train: stopped:" not in err_2, err_2
    assert "Traceback" not in err + err_2


def test_sigterm_with_every_peer_alive_is_a_stop_vote_not_a_loss():
    """Slurm's scancel or one rank's SIGTERM: every peer runs, so the vote decides; here no
    step comes, and the grace ends the rank with 143 and its own line, as before."""
    other_job, = _start(1, namespace=uuid.uuid4().hex)  # another job's rank 1: not a peer
    rank, peer = _start(0, 1, namespace=uuid.uuid4().hex, grace_s=1)
    try:
        os.kill(other_job.pid, signal.SIGKILL)
        other_job.wait()
        os.kill(rank.pid, signal.SIGTERM)
        code, err, _ = _end(rank)
    finally:
        for proc in (peer, other_job, rank):
            proc.kill() if proc.poll() is None else None
    assert code == 143, err
    assert "no step boundary reached within 1 s" in err and "a peer was lost" not in err, err


# After a peer's connection dropped (horovodrun --gloo: the survivor's collective fails
# before any SIGTERM), the rank can still name which rank of its host is gone.
GONE = """
import os, sys
from horovod_train import local_peers
sys.stdin.readline()
print("ready", flush=True)
sys.stdin.readline()
print(local_peers.gone_ranks(), flush=True)
sys.stdin.readline()
"""


def _gloo_ranks(size: int, local_size: int) -> list[subprocess.Popen]:
    port = uuid.uuid4().int % 20000 + 30000  # a job identity only: nothing listens
    procs = [subprocess.Popen([sys.executable, "-c", GONE], cwd=ROOT, text=True,
                              env=child_env(HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1",
                                            HOROVOD_GLOO_RENDEZVOUS_PORT=port, PMIX_RANK=rank,
                                            HOROVOD_SIZE=size, HOROVOD_LOCAL_SIZE=local_size),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for rank in range(size)]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    return procs


def _ask_gone(proc) -> str:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


@pytest.mark.parametrize("local_size, answer", [(3, "[1]"), (2, "None")],
                         ids=["every-rank-on-this-host", "some-ranks-elsewhere"])
def test_the_ranks_gone_from_this_host_are_named_only_when_all_ran_here(local_size, answer):
    procs = _gloo_ranks(3, local_size)
    try:
        procs[1].kill()
        procs[1].wait()
        assert _ask_gone(procs[0]) == answer
        assert _ask_gone(procs[2]) == answer
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
