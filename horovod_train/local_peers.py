"""This job's other ranks on this host, and which of them have ended (issue 55, item 6).

When a rank is killed (kill -9, the OOM killer, a crash), mpirun and horovodrun end the
job with their own code and line (mpirun: 137 and `exited on signal 9`); the survivors
get the launcher's SIGTERM while they wait in a collective for the dead rank, and used
to end without a word. A rank records its peers on this host (pid and start time, read
from /proc) when training starts, so on SIGTERM it can tell from facts whether one of
them had already ended. It never guesses about ranks on other hosts: those it cannot see.

A peer is a process of the same user running the same command line with the same job
identity in its environment (the variables in JOB_KEYS) and another rank. Linux /proc
only; elsewhere no peer is found and nothing is said.
"""
import os
from dataclasses import dataclass

from launch import contract
from launch.procstat import start_time

# Values every rank of one job shares and no other job's rank does: the PMIx namespace
# (Open MPI's mpirun, horovodrun --mpi, srun --mpi=pmix), horovodrun --gloo's rendezvous
# address and port, Slurm's job and step. A process with none of them (one process, MWMS
# workers: their own health check names a lost peer) has no peers here.
JOB_KEYS = ("PMIX_NAMESPACE", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
            contract.SLURM_JOB_ID, contract.SLURM_STEP_ID)
RANK_KEYS = (contract.HOROVOD_RANK, contract.OMPI_RANK, contract.PMIX_RANK,
             contract.PMI_RANK, contract.SLURM_PROCID)
# The job's size and this host's share of it, where a launcher says both.
SIZE_KEYS = ((contract.HOROVOD_SIZE, contract.HOROVOD_LOCAL_SIZE),
             (contract.OMPI_SIZE, contract.OMPI_LOCAL_SIZE),
             (contract.PMI_SIZE, contract.MPI_LOCALNRANKS))


@dataclass(frozen=True)
class Peer:
    rank: int
    pid: int
    started: int  # /proc/PID/stat's start time: a reused pid is another process


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None  # gone, or another user's


def environ_of(pid: str, proc: str = "/proc") -> dict[str, str] | None:
    data = _read(f"{proc}/{pid}/environ")
    if data is None:
        return None
    pairs = (item.partition(b"=") for item in data.split(b"\0") if item)
    return {name.decode(errors="replace"): value.decode(errors="replace")
            for name, _, value in pairs}


def job_key(environ: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((name, environ[name]) for name in JOB_KEYS if name in environ)


def rank_of(environ: dict[str, str]) -> int | None:
    for name in RANK_KEYS:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def find(proc: str = "/proc") -> tuple[Peer, ...]:
    """The other ranks of this job on this host now, lowest rank first."""
    mine = environ_of("self", proc)
    key = job_key(mine or {})
    own_rank = rank_of(mine or {})
    command = _read(f"{proc}/self/cmdline")
    if not key or own_rank is None or command is None:
        return ()
    peers = []
    for pid in filter(str.isdigit, os.listdir(proc)):
        if int(pid) == os.getpid() or _read(f"{proc}/{pid}/cmdline") != command:
            continue  # launchers, shells and helpers run other command lines
        environ = environ_of(pid, proc)
        rank = rank_of(environ or {})
        started = start_time(pid, proc)
        if environ and job_key(environ) == key and rank not in (None, own_rank) and started:
            peers.append(Peer(rank, int(pid), started))
    return tuple(sorted(peers, key=lambda peer: peer.rank))


def ended(peers, proc: str = "/proc") -> list[Peer]:
    """The peers that have ended since they were found (gone, a zombie, or a reused pid)."""
    return [peer for peer in peers if start_time(peer.pid, proc) != peer.started]


def gone_ranks(proc: str = "/proc") -> list[int] | None:
    """The ranks of this job no longer running, when every rank ran on this host (the
    launcher's local size is its size); None when some ran elsewhere, where they cannot
    be seen, or when the launcher does not say."""
    mine = environ_of("self", proc) or {}
    own = rank_of(mine)
    for size_key, local_key in SIZE_KEYS:
        size, local = mine.get(size_key, ""), mine.get(local_key, "")
        if size.isdigit() and size == local and own is not None:
            running = {peer.rank for peer in find(proc)} | {own}
            return sorted(set(range(int(size))) - running)
    return None
