"""The environment-variable contract between launchers and workers. TF-free.

Launchers (horovodrun, mpirun, srun, a TF_CONFIG writer) each announce rank and size
under their own names. This module reads them, in one place, so the rest of the
package asks `launch_info()` and never looks at os.environ itself.
"""
import dataclasses
import json
import os
import re

from horovod_train.errors import UsageError, usage_error
from launch import contract

# Horovod's own launcher (both gloo and mpi controllers set these).
HOROVOD_RANK = "HOROVOD_RANK"
HOROVOD_SIZE = "HOROVOD_SIZE"
HOROVOD_LOCAL_RANK = "HOROVOD_LOCAL_RANK"
HOROVOD_LOCAL_SIZE = "HOROVOD_LOCAL_SIZE"
HOROVOD_CONTROLLER = "HOROVOD_CONTROLLER"
# Open MPI's mpirun.
OMPI_RANK = "OMPI_COMM_WORLD_RANK"
OMPI_SIZE = "OMPI_COMM_WORLD_SIZE"
OMPI_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
OMPI_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE"
# MPICH / Intel MPI (Hydra).
PMI_RANK = "PMI_RANK"
PMI_SIZE = "PMI_SIZE"
MPI_LOCALRANKID = "MPI_LOCALRANKID"
MPI_LOCALNRANKS = "MPI_LOCALNRANKS"
# Slurm's srun.
SLURM_PROCID = "SLURM_PROCID"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_GPUS_PER_TASK = "SLURM_GPUS_PER_TASK"  # srun --gpus-per-task (binds per task by default)
SLURM_GPU_BIND = "SLURM_GPU_BIND"  # srun --gpu-bind, e.g. "single:1", "verbose,none"
# CUDA's own: the GPUs this process may use (a launcher or wrapper may set it per rank).
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# tf.distribute.
TF_CONFIG = contract.ENV_TF_CONFIG
# Our own: set by `python -m launch` for mwms ranks started by mpirun/horovodrun.
TRAIN_HOSTS = contract.ENV_HOSTS  # "h1:2,h2:2", ranks fill hosts in order
MWMS_PORT_BASE = contract.ENV_MWMS_PORT_BASE


@dataclasses.dataclass(frozen=True)
class LaunchInfo:
    """Who started this process, and where it sits in the job."""
    launcher: str  # "horovodrun", "mpirun", "mpich", "srun", "tf_config" or "none"
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def is_distributed_launch(self) -> bool:
        """True when an MPI-style launcher (one Horovod can join) started us."""
        return self.launcher in contract.MPI_STYLE_LAUNCHERS


_DIGITS = re.compile(r"[0-9]+")


def _int(env, name, default=None, low=0):
    """The variable as an int >= low; absent -> default. A malformed value is the
    user's (or a wrapper's) input: one usage line naming it, never a ValueError."""
    if name not in env or (default is not None and env[name] == ""):
        return default
    value = env[name]
    # Plain digits only: int() would also take ' 1', '1_0' and '+1'.
    if _DIGITS.fullmatch(value) and int(value) >= low:
        return int(value)
    raise _bad_variable(name, value, "a positive integer" if low else "a non-negative integer")


def _bad_variable(name: str, value, expected: str) -> UsageError:
    return usage_error(f"environment variable {name}", value, expected,
                       f"unset {name}, or let the launcher set it (start ranks with "
                       f"horovodrun, mpirun or srun, not by exporting rank variables by hand)")


def _slurm_local_size(env) -> int:
    # SLURM_NTASKS_PER_NODE looks like "2" or "2(x3),1"; the first group is ours only on
    # homogeneous jobs, which is the common case and the one we plan for.
    raw = env.get(SLURM_NTASKS_PER_NODE, "1")
    first = raw.split(",")[0].split("(")[0]
    if not _DIGITS.fullmatch(first) or int(first) < 1:
        raise _bad_variable(SLURM_NTASKS_PER_NODE, raw, "a positive integer, e.g. 8 or 8(x2)")
    return int(first)


def local_position(hosts: list[str], index: int) -> tuple[int, int]:
    """(local rank, local size) of worker `index` among workers on the same host."""
    mine = hosts[index]
    return sum(1 for h in hosts[:index] if h == mine), sum(1 for h in hosts if h == mine)


def _tf_config_info(env) -> LaunchInfo | None:
    raw = env.get(TF_CONFIG)
    if not raw:
        return None
    try:
        config = json.loads(raw)
        hosts = [str(w).rpartition(":")[0] for w in config["cluster"]["worker"]]
        index = int(config["task"]["index"])
        local_rank, local_size = local_position(hosts, index)
    except (ValueError, KeyError, TypeError, IndexError):
        return LaunchInfo("tf_config")  # the mwms backend reports the bad field
    return LaunchInfo("tf_config", index, len(hosts), local_rank, local_size)


def launch_info(env=None) -> LaunchInfo:
    """Reads rank/size from whichever launcher started this process."""
    env = os.environ if env is None else env
    if HOROVOD_RANK in env:
        return LaunchInfo("horovodrun", _int(env, HOROVOD_RANK), _int(env, HOROVOD_SIZE, 1, low=1),
                          _int(env, HOROVOD_LOCAL_RANK, 0), _int(env, HOROVOD_LOCAL_SIZE, 1, low=1))
    if OMPI_RANK in env:
        return LaunchInfo("mpirun", _int(env, OMPI_RANK), _int(env, OMPI_SIZE, 1, low=1),
                          _int(env, OMPI_LOCAL_RANK, 0), _int(env, OMPI_LOCAL_SIZE, 1, low=1))
    if PMI_RANK in env:
        return LaunchInfo("mpich", _int(env, PMI_RANK), _int(env, PMI_SIZE, 1, low=1),
                          _int(env, MPI_LOCALRANKID, 0), _int(env, MPI_LOCALNRANKS, 1, low=1))
    if SLURM_PROCID in env and _int(env, SLURM_NTASKS, 1, low=1) > 1:
        return LaunchInfo("srun", _int(env, SLURM_PROCID), _int(env, SLURM_NTASKS, 1, low=1),
                          _int(env, SLURM_LOCALID, 0), _slurm_local_size(env))
    return _tf_config_info(env) or LaunchInfo("none")


def gpus_bound_per_task(env=None) -> bool:
    """True when the launcher gave this process GPUs of its own, shared with no other
    local rank, so local rank i must not index GPU i. Signs: a one-device
    CUDA_VISIBLE_DEVICES (srun --gpus-per-task=1 or --gpu-bind=single:1, a per-rank
    wrapper), or ranks started by srun itself with --gpus-per-task (which binds per
    task unless --gpu-bind=none). Only srun's own tasks count: an mpirun inside an
    sbatch job inherits SLURM_GPUS_PER_TASK without any binding."""
    env = os.environ if env is None else env
    listed = [d.strip() for d in env.get(CUDA_VISIBLE_DEVICES, "").split(",") if d.strip()]
    if len(listed) == 1 and listed[0] != "-1":
        return True
    if not env.get(SLURM_GPUS_PER_TASK) or launch_info(env).launcher != "srun":
        return False
    return "none" not in env.get(SLURM_GPU_BIND, "").split(",")


def default_intra_op_threads(local_size: int, cores: int | None = None) -> int:
    """cores / ranks on this host, at least 1 (the launcher's rule: contract.threads_per_rank)."""
    if cores is None:
        # The affinity mask, not cpu_count(): under Slurm or taskset we own fewer cores.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return contract.threads_per_rank(cores, local_size)
