"""What the login side and the worker side must agree on, written once. Stdlib only.

`launch/` (which never imports TensorFlow or Horovod) and `horovod_train/` both import
these names, so a backend name, an environment variable the launcher sets for the
ranks, or a default port cannot drift apart between the two.
"""
import types

# ---- the name lists (flags, the backend registry, the planner and the launcher) ----
BACKENDS = ("horovod", "mwms", "local")  # the registry's names; "auto" picks one
BACKEND_CHOICES = ("auto",) + BACKENDS
LAUNCHED_BACKENDS = ("horovod", "mwms")  # what `python -m launch` starts several ranks of
# --elastic: backends that re-form their ring when ranks come and go (horovodrun
# --min-np/--max-np).
ELASTIC_BACKENDS = ("horovod",)
OPTIMIZERS = ("adam", "sgd")
COLLECTIVES = ("auto", "ring", "nccl")  # mwms: CommunicationImplementation
PRECISIONS = ("fp32", "mixed_float16", "mixed_bfloat16")  # Keras dtype policies
COMPRESSIONS = ("none", "fp16", "bf16")  # gradients on the wire
PROGRESS_MODES = ("auto", "bar", "lines")
JIT_MODES = ("auto", "true", "false")

# ---- the environment the launcher sets for the ranks ----
ENV_HOSTS = "HOROVOD_TRAIN_HOSTS"  # "h1:2,h2:2": hosts and slots, ranks fill them in order
ENV_MWMS_PORT_BASE = "HOROVOD_TRAIN_MWMS_PORT_BASE"  # mwms worker i listens on base + local rank
ENV_TF_WORKERS = "HOROVOD_TRAIN_TF_WORKERS"  # sbatch: the quoted worker list for TF_CONFIG
DEFAULT_MWMS_PORT_BASE = 12345  # outside a Slurm job; inside one, see slurm_port_base
# The trainer's --stop_grace_s default: seconds from SIGTERM to a checkpoint at a step
# boundary; sbatch scripts ask Slurm to signal at least this long before the time limit.
DEFAULT_STOP_GRACE_S = 60.0
ENV_TF_CONFIG = "TF_CONFIG"  # tf.distribute's own: the cluster and this worker's index

# ---- who started the ranks (horovod_train.env reads each one's variables) ----
MPI_STYLE_LAUNCHERS = ("horovodrun", "mpirun", "mpich", "srun")  # Horovod can join these
# Horovod's horovodrun (gloo and mpi controllers).
HOROVOD_RANK = "HOROVOD_RANK"
HOROVOD_SIZE = "HOROVOD_SIZE"
HOROVOD_LOCAL_RANK = "HOROVOD_LOCAL_RANK"
HOROVOD_LOCAL_SIZE = "HOROVOD_LOCAL_SIZE"
# Open MPI's mpirun (its ranks; a rank started by srun --mpi=pmix has none of these).
OMPI_RANK = "OMPI_COMM_WORLD_RANK"
OMPI_SIZE = "OMPI_COMM_WORLD_SIZE"
OMPI_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
OMPI_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE"
# PMI-1/2: MPICH / Intel MPI's Hydra sets all four; srun --mpi=pmi2 only the first two.
PMI_RANK = "PMI_RANK"
PMIX_RANK = "PMIX_RANK"  # srun --mpi=pmix sets it in every task
PMI_SIZE = "PMI_SIZE"
MPI_LOCALRANKID = "MPI_LOCALRANKID"
MPI_LOCALNRANKS = "MPI_LOCALNRANKS"
# Slurm. srun sets these in every task of a step (whatever options it was given); the
# job's batch script and an salloc shell have SLURM_JOB_ID and SLURM_NTASKS but no step.
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_NTASKS = "SLURM_NTASKS"  # the job's tasks (srun --preserve-env keeps the job's)
SLURM_STEP_ID = "SLURM_STEP_ID"  # a number; absent or special in the batch step
SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
SLURM_STEP_NUM_NODES = "SLURM_STEP_NUM_NODES"
SLURM_STEP_NODELIST = "SLURM_STEP_NODELIST"  # 'n[1-2]'; SLURM_JOB_NODELIST is the job's
SLURM_STEP_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"  # '2(x3),1'; per step node
SLURM_PROCID = "SLURM_PROCID"  # rank in the step (0 in the batch step too)
SLURM_NODEID = "SLURM_NODEID"  # index of this node in SLURM_STEP_NODELIST
SLURM_LOCALID = "SLURM_LOCALID"  # rank among the step's tasks on this node
SLURM_CPUS_PER_TASK = "SLURM_CPUS_PER_TASK"  # srun/sbatch --cpus-per-task, when given
SLURM_GPUS_PER_TASK = "SLURM_GPUS_PER_TASK"  # srun --gpus-per-task (binds per task by default)
SLURM_GPU_BIND = "SLURM_GPU_BIND"  # srun --gpu-bind, e.g. "single:1", "verbose,none"
# Step ids from 0xfffffff0 up are Slurm's special steps (batch 0xfffffffb, extern,
# interactive 0xfffffffa): the job's own shell, never one of its ranks.
SLURM_MAX_NORMAL_STEP_ID = 0xfffffff0
# CUDA's own: the GPUs this process may use (a launcher or wrapper may set it per rank).
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# ---- several ranks sharing one CPU host's cores ----
# The defaults chosen then (HOROVOD_CYCLE_TIME, OMPI_MCA_mpi_yield_when_idle) depend on
# the Horovod build installed: launch/horovod_build.py, cpu_sharing_defaults.
# ---- Open MPI's daemons ----
# MCA parameters the launcher gives the Open MPI it starts, unless the user gave them:
# `-mca NAME VALUE` on our mpirun's line, OMPI_MCA_NAME in horovodrun --mpi's environment
# (mpirun hands both on to every orted's command line).
OPEN_MPI_DAEMON_MCA = types.MappingProxyType({
    # Open MPI 4.1's orted maps the hwloc topology it shares with its ranks into the
    # "biggest" hole of its address space; on recent kernels that hole ends just below
    # the stack and hwloc_shmem_topology_write crashed 1 remote start in ~7 (SIGSEGV,
    # tests/multiprocess/test_multihost_netns.py). "none": each rank reads the topology
    # itself, which costs a few milliseconds at start-up.
    "rtc_hwloc_vmhole": "none",
})
OPEN_MPI_MCA_ENV_PREFIX = "OMPI_MCA_"


def open_mpi_mca_env_name(name: str) -> str:
    """The environment variable Open MPI reads for MCA parameter `name`."""
    return OPEN_MPI_MCA_ENV_PREFIX + name


# TensorFlow's own thread counts. The program honours them (horovod_train.env's rule:
# --intra_op_threads, then these, then SLURM_CPUS_PER_TASK, then cores / local ranks).
ENV_TF_INTRAOP_THREADS = "TF_NUM_INTRAOP_THREADS"
ENV_TF_INTEROP_THREADS = "TF_NUM_INTEROP_THREADS"
# Each rank's thread pools, sized cores // ranks (see threads_per_rank); the launcher and
# the sbatch script export them for the ranks they start.
ENV_THREAD_NAMES = ("OMP_NUM_THREADS", ENV_TF_INTRAOP_THREADS)
# Horovod's own: horovodrun sets it to "1" in every rank of an elastic run, whose ring
# may re-form at another size under an already traced step.
ENV_HOROVOD_ELASTIC = "HOROVOD_ELASTIC"


def horovod_elastic(environ) -> bool:
    """Whether horovodrun started this rank as part of an elastic run."""
    return environ.get(ENV_HOROVOD_ELASTIC) == "1"


# "auto" (default): a rank that shares a CPU host with others, and that no launcher bound,
# binds itself to its share of the cores (horovod_train/cpus.py); "none": it does not.
ENV_CPU_BIND = "HOROVOD_TRAIN_CPU_BIND"


def threads_per_rank(cores: int, ranks: int) -> int:
    """cores / ranks on a host, at least 1: oversubscribed ranks run up to 3x slower."""
    return max(1, (cores or 1) // max(1, ranks))


# ---- mwms ports of a Slurm job ----
# A job given no port base takes one from its SLURM_JOB_ID, so two jobs sharing a node
# (two 1-GPU jobs on one host) do not both listen on 12345:
#     base   = 15000 + (SLURM_JOB_ID mod slots) * stride
#     stride = 8, or the next multiple of 8 that holds the tasks per node
#     slots  = (32768 - 15000) // stride          (2221 for up to 8 tasks per node)
# 15000 is launch/ports.py's LOWEST and 32768 the start of Linux's default ephemeral range
# (ports.py's rule: listening ports below it). Fixed numbers, not this node's range:
# every node of the job must compute the same base. Jobs whose ids differ by less than
# `slots` never share a port at the same stride; ids `slots` apart do.
SLURM_PORT_STRIDE = 8


def slurm_port_layout(tasks_per_node: int) -> tuple[int, int, int]:
    """(lowest base, stride, slots) for jobs of up to `tasks_per_node` per node."""
    from launch.ports import DEFAULT_EPHEMERAL, LOWEST  # here: launch/ imports contract
    stride = SLURM_PORT_STRIDE * -(-max(1, tasks_per_node) // SLURM_PORT_STRIDE)
    return LOWEST, stride, max(1, (DEFAULT_EPHEMERAL[0] - LOWEST) // stride)


def slurm_port_base(job_id: int, tasks_per_node: int) -> int:
    """The port base of Slurm job `job_id` (see above); worker k of a node listens on
    base + k."""
    low, stride, slots = slurm_port_layout(tasks_per_node)
    return low + (job_id % slots) * stride


def slurm_port_base_shell(tasks_per_node: int) -> str:
    """slurm_port_base as bash arithmetic on $SLURM_JOB_ID, for the sbatch script."""
    low, stride, slots = slurm_port_layout(tasks_per_node)
    return (f"$(( {low} + ${{{SLURM_JOB_ID}:?is unset: submit this script with sbatch}} "
            f"% {slots} * {stride} ))")
