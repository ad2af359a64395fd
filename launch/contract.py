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
DEFAULT_MWMS_PORT_BASE = 12345
ENV_TF_CONFIG = "TF_CONFIG"  # tf.distribute's own: the cluster and this worker's index

# ---- who started the ranks (horovod_train.env reads each one's variables) ----
MPI_STYLE_LAUNCHERS = ("horovodrun", "mpirun", "mpich", "srun")  # Horovod can join these

# ---- several ranks sharing one CPU host's cores ----
# Chosen by the launcher (for the ranks it starts) and by the horovod backend (for ranks
# started otherwise), only where the user has not set them; never on a GPU host.
CPU_SHARING_DEFAULTS = types.MappingProxyType({
    # Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms; at the 1 ms
    # default it steals cycles from ranks that share cores.
    "HOROVOD_CYCLE_TIME": "5",
    # Open MPI busy-polls while waiting; yielding gives the core back to the
    # neighbouring rank. Read at MPI_Init, i.e. inside hvd.init().
    "OMPI_MCA_mpi_yield_when_idle": "1",
})
# Each rank's thread pools, sized cores // ranks (see threads_per_rank).
ENV_THREAD_NAMES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def threads_per_rank(cores: int, ranks: int) -> int:
    """cores / ranks on a host, at least 1: oversubscribed ranks run up to 3x slower."""
    return max(1, (cores or 1) // max(1, ranks))
