"""The environment-variable contract between launchers and workers. TF-free.

Launchers (horovodrun, mpirun, srun, a TF_CONFIG writer) each announce rank and size
under their own names. This module reads them, in one place, so the rest of the
package asks `launch_info()` and never looks at os.environ itself.

Under Slurm only what srun sets in every task counts (SLURM_STEP_NUM_TASKS,
SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_PROCID, SLURM_NODEID,
SLURM_LOCALID): SLURM_NTASKS_PER_NODE exists only with --ntasks-per-node, and the job's
batch step has SLURM_NTASKS and SLURM_PROCID=0 too but is no rank. srun --mpi=pmi2 adds
PMI_RANK/PMI_SIZE without a local rank, so Slurm's is used when they are the step's.
"""
import dataclasses
import json
import os
import re

from horovod_train.errors import UsageError, usage_error
from launch import contract


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


def local_position(hosts: list[str], index: int) -> tuple[int, int]:
    """(local rank, local size) of worker `index` among workers on the same host."""
    mine = hosts[index]
    return sum(1 for h in hosts[:index] if h == mine), sum(1 for h in hosts if h == mine)


def _tf_config_info(env) -> LaunchInfo | None:
    raw = env.get(contract.ENV_TF_CONFIG)
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


def _announced(env, launcher: str, rank: str, size: str, local_rank: str,
               local_size: str) -> LaunchInfo:
    """A launcher's position as it announces it under its own variable names."""
    return LaunchInfo(launcher, _int(env, rank), _int(env, size, 1, low=1),
                      _int(env, local_rank, 0), _int(env, local_size, 1, low=1))


def launch_info(env=None) -> LaunchInfo:
    """Reads rank/size from whichever launcher started this process.

    Raises UsageError for the job's own shell (batch script, salloc) of a Slurm job of
    several tasks: one process there would train alone believing it is rank 0 of N."""
    env = os.environ if env is None else env
    if contract.HOROVOD_RANK in env:
        return _announced(env, "horovodrun", contract.HOROVOD_RANK, contract.HOROVOD_SIZE,
                          contract.HOROVOD_LOCAL_RANK, contract.HOROVOD_LOCAL_SIZE)
    if contract.OMPI_RANK in env:
        # mpirun's own numbers, also when its daemons were started by an srun step.
        return _announced(env, "mpirun", contract.OMPI_RANK, contract.OMPI_SIZE,
                          contract.OMPI_LOCAL_RANK, contract.OMPI_LOCAL_SIZE)
    step = slurm_step(env)
    if contract.PMI_RANK in env and not (step and _pmi_is_the_step(env, step)):
        return _announced(env, "mpich", contract.PMI_RANK, contract.PMI_SIZE,
                          contract.MPI_LOCALRANKID, contract.MPI_LOCALNRANKS)
    if step is not None and step.size > 1:
        # srun's tasks, with PMI-2 or PMIx or none: Slurm knows each task's node.
        return LaunchInfo("srun", step.rank, step.size, step.local_rank, step.local_size)
    if step is None and not env.get(contract.ENV_TF_CONFIG):
        _refuse_job_shell(env)
    return _tf_config_info(env) or LaunchInfo("none")


# ------------------------------------------------------------------------------- Slurm
@dataclasses.dataclass(frozen=True)
class SlurmStep:
    """This task's place in its srun step, from the variables srun sets in every task."""
    rank: int                       # SLURM_PROCID
    size: int                       # SLURM_STEP_NUM_TASKS
    local_rank: int                 # SLURM_LOCALID
    local_size: int                 # SLURM_STEP_TASKS_PER_NODE, this node's count
    node_index: int                 # SLURM_NODEID
    nodes: tuple[str, ...]          # SLURM_STEP_NODELIST, expanded
    tasks_per_node: tuple[int, ...]  # SLURM_STEP_TASKS_PER_NODE, expanded

    def hosts(self) -> list[str]:
        """The node of every rank, in rank order, as srun --distribution=block places
        them (a node's tasks on consecutive ranks)."""
        return [node for node, count in zip(self.nodes, self.tasks_per_node)
                for _ in range(count)]

    @property
    def block_rank(self) -> int:
        """The rank srun --distribution=block gives this node's local task."""
        return sum(self.tasks_per_node[:self.node_index]) + self.local_rank


def slurm_step(env=None) -> SlurmStep | None:
    """This task of an srun step, or None outside one (no step, or the job's batch or
    interactive step). Every variable is checked against the others."""
    env = os.environ if env is None else env
    if (contract.SLURM_STEP_NUM_TASKS not in env
            or not _is_normal_step(env.get(contract.SLURM_STEP_ID))):
        return None
    size = _required_int(env, contract.SLURM_STEP_NUM_TASKS, low=1)
    nodes = _slurm_list(env, contract.SLURM_STEP_NODELIST)
    counts = _slurm_list(env, contract.SLURM_STEP_TASKS_PER_NODE)
    per_node, nodelist = env[contract.SLURM_STEP_TASKS_PER_NODE], env[contract.SLURM_STEP_NODELIST]
    if len(counts) != len(nodes):
        raise _bad_variable(contract.SLURM_STEP_TASKS_PER_NODE, per_node,
                            f"one count per node of SLURM_STEP_NODELIST "
                            f"({nodelist!r}: {len(nodes)} nodes)")
    _expect_equal(env, contract.SLURM_STEP_NUM_TASKS, sum(counts),
                  f"the sum of SLURM_STEP_TASKS_PER_NODE ({per_node!r})")
    if contract.SLURM_STEP_NUM_NODES in env:
        _expect_equal(env, contract.SLURM_STEP_NUM_NODES, len(nodes),
                      f"the number of nodes in SLURM_STEP_NODELIST ({nodelist!r})")
    rank = _below(env, contract.SLURM_PROCID, size, f"a rank below SLURM_STEP_NUM_TASKS={size}")
    node = _below(env, contract.SLURM_NODEID, len(nodes),
                  f"a node index below SLURM_STEP_NUM_NODES={len(nodes)}")
    local = _below(env, contract.SLURM_LOCALID, counts[node],
                   f"a local rank below this node's {counts[node]} tasks "
                   f"(SLURM_STEP_TASKS_PER_NODE {per_node!r})")
    return SlurmStep(rank, size, local, counts[node], node, tuple(nodes), tuple(counts))


def slurm_job_id(env=None) -> int | None:
    """SLURM_JOB_ID as a number; None outside a Slurm job."""
    env = os.environ if env is None else env
    return _int(env, contract.SLURM_JOB_ID)


def _is_normal_step(step_id) -> bool:
    # srun's steps are numbered from 0; the batch, extern and interactive steps have
    # ids from SLURM_MAX_NORMAL_STEP_ID up (printed unsigned, or negative by %d), or a
    # name. An absent id with step variables present is taken as srun's.
    if step_id is None:
        return True
    return bool(_DIGITS.fullmatch(step_id)) and int(step_id) < contract.SLURM_MAX_NORMAL_STEP_ID


def _pmi_is_the_step(env, step: SlurmStep) -> bool:
    """srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE to the task's own numbers. Hydra (mpiexec
    in a Slurm job) starts its proxies with srun, and its ranks inherit a step that is
    the proxies': its numbers differ, and then they are Hydra's to tell."""
    return (_int(env, contract.PMI_RANK) == step.rank
            and _int(env, contract.PMI_SIZE, 1, low=1) == step.size)


def _refuse_job_shell(env) -> None:
    ntasks = _int(env, contract.SLURM_NTASKS, 1, low=1)
    if contract.SLURM_JOB_ID not in env or ntasks == 1:
        return  # not in a Slurm job, or a 1-task job: one process is the whole job
    raise usage_error(
        f"Slurm job {env[contract.SLURM_JOB_ID]} (SLURM_NTASKS={ntasks})",
        "a process outside any srun step (no SLURM_STEP_NUM_TASKS: the job's batch script "
        f"or salloc shell, where one process would train alone as rank 0 of {ntasks})",
        f"one process per task, started by srun (which sets SLURM_STEP_NUM_TASKS and "
        f"SLURM_PROCID in each of the {ntasks})",
        "run it under srun (srun python -m horovod_train ...; srun -n 1 for one process), "
        "or submit the script `python -m launch slurm` renders")


def _slurm_list(env, name: str) -> list:
    from launch.errors import LaunchError
    from launch.slurm_nodes import expand_nodelist, expand_tasks_per_node
    expand = expand_nodelist if name == contract.SLURM_STEP_NODELIST else expand_tasks_per_node
    if name not in env:
        raise _missing(name)
    try:
        return expand(env[name], where=name)
    except LaunchError as err:
        # "NAME: received ...; expected ... Fix: ..." from the one parser of launch/.
        expected = str(err).partition("; expected ")[2].partition(". Fix: ")[0]
        raise _bad_variable(name, env[name], expected or "a Slurm list") from None


def _required_int(env, name: str, low: int = 0) -> int:
    if name not in env:
        raise _missing(name)
    return _int(env, name, low=low)


def _below(env, name: str, limit: int, expected: str) -> int:
    value = _required_int(env, name)
    if value >= limit:
        raise _bad_variable(name, env[name], expected)
    return value


def _expect_equal(env, name: str, wanted: int, what: str) -> None:
    if _required_int(env, name) != wanted:
        raise _bad_variable(name, env[name], f"{what}: {wanted}")


def _missing(name: str) -> UsageError:
    # Not usage_error: there is no received value to show, and "received None" read as
    # if the variable held the text None.
    return UsageError(f"environment variable {name}: not set; expected a value (srun sets "
                      f"it in every task of a step). Fix: start the ranks with srun, or "
                      f"unset the SLURM_STEP_* variables a wrapper left behind")


def check_mpi_wired(env=None) -> None:
    """Refuses an srun step of several tasks that srun gave no MPI wire-up (no
    --mpi=pmix, and a cluster whose MpiDefault is none): Horovod's MPI would abort every
    rank in MPI_Init with a page of text after TensorFlow loaded. Gloo needs horovodrun,
    so under srun the horovod backend always needs MPI."""
    env = os.environ if env is None else env
    info = launch_info(env)
    wired = contract.PMIX_RANK in env or contract.PMI_RANK in env
    if info.launcher != "srun" or info.size < 2 or wired:
        return
    raise UsageError(
        f"srun: received a step of {info.size} tasks without an MPI plugin (no "
        f"{contract.PMIX_RANK} or {contract.PMI_RANK} in the task's environment); expected srun "
        f"to wire the ranks for "
        f"Horovod's MPI. Fix: run srun --mpi=pmix ... (see srun --mpi=list), or submit the "
        f"script `python -m launch slurm` renders")


def gpus_bound_per_task(env=None) -> bool:
    """True when the launcher gave this process GPUs of its own, shared with no other
    local rank, so local rank i must not index GPU i. Signs: a one-device
    CUDA_VISIBLE_DEVICES (srun --gpus-per-task=1 or --gpu-bind=single:1, a per-rank
    wrapper), or ranks started by srun itself with --gpus-per-task (which binds per
    task unless --gpu-bind=none). Only srun's own tasks count: an mpirun inside an
    sbatch job inherits SLURM_GPUS_PER_TASK without any binding."""
    env = os.environ if env is None else env
    listed = [d.strip() for d in env.get(contract.CUDA_VISIBLE_DEVICES, "").split(",") if d.strip()]
    if len(listed) == 1 and listed[0] != "-1":
        return True
    if not env.get(contract.SLURM_GPUS_PER_TASK) or launch_info(env).launcher != "srun":
        return False
    return "none" not in env.get(contract.SLURM_GPU_BIND, "").split(",")


def default_intra_op_threads(local_size: int, cores: int | None = None, env=None) -> int:
    """Intra-op threads of a rank that was given no --intra_op_threads, by one rule:
    TF_NUM_INTRAOP_THREADS when set (TensorFlow's own name, exported by `python -m launch`
    and the sbatch script); else SLURM_CPUS_PER_TASK, the CPUs Slurm gave this task, at
    most the CPUs this process may run on (Slurm 22.05's srun does not inherit the batch
    script's --cpus-per-task, but the variable is inherited); else cores / local ranks
    (contract.threads_per_rank, the launcher's rule)."""
    env = os.environ if env is None else env
    if cores is None:
        # The affinity mask, not cpu_count(): under Slurm or taskset we own fewer cores.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    given = _thread_count(env, contract.ENV_TF_INTRAOP_THREADS)
    if given:
        return given
    per_task = _thread_count(env, contract.SLURM_CPUS_PER_TASK, low=1)
    if per_task:
        return max(1, min(per_task, cores or per_task))
    return contract.threads_per_rank(cores, local_size)


def default_inter_op_threads(local_size: int, env=None) -> int:
    """TF_NUM_INTEROP_THREADS when set; else 2 when ranks share a host; else 0 (TF's)."""
    env = os.environ if env is None else env
    return _thread_count(env, contract.ENV_TF_INTEROP_THREADS) or (2 if local_size > 1 else 0)


def _thread_count(env, name: str, low: int = 0) -> int | None:
    # TensorFlow reads 0 or '' in its variables as "not set"; so do we.
    if env.get(name, "") == "":
        return None
    return _int(env, name, low=low) or None
