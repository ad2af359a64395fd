"""Process-level TensorFlow settings that must be made before TF runs any op."""
import os

from absl import logging

from horovod_train import cpus, env

# TensorFlow reads this once, when its first op creates the CPU allocator.
ENV_TF_CPU_BFC = "TF_CPU_ALLOCATOR_USE_BFC"


def physical_gpus() -> int:
    """GPUs on this host, before any device is created: the CPU-only choices below are
    never made on a GPU host."""
    import tensorflow as tf
    return len(tf.config.list_physical_devices("GPU"))  # creates no device


def choose_cpu_allocator(environ=None, gpus=None) -> dict:
    """On a CPU host, TF's pooling (BFC) CPU allocator, unless the user set the variable;
    returns what it chose. TF's default allocator mallocs every tensor afresh, and glibc
    maps a large one anew each time, so each allreduce's output (and each big gradient)
    faults its pages in again, and a large allreduce paid for that on every call
    (bench/comm.py, M3 in docs/benchmarks.md, measures it). Must run before TF's first op, as
    configure_threads must. GPU hosts keep TF's default: unmeasured there."""
    environ = os.environ if environ is None else environ
    gpus = physical_gpus() if gpus is None else gpus
    if gpus or ENV_TF_CPU_BFC in environ:
        return {}
    environ[ENV_TF_CPU_BFC] = "true"
    return {ENV_TF_CPU_BFC: "true"}


def bind_cpus(launch, elastic: bool = False, gpus=None) -> str:
    """Binds this rank to its share of a CPU host's cores (horovod_train/cpus.py) unless
    a launcher bound it or the host has GPUs; returns what was decided, for the log.
    Call after configure_threads (whose rule counts the cores this process may use) and
    before the backend starts its threads."""
    gpus = physical_gpus() if gpus is None else gpus
    chosen, why = cpus.planned(launch.local_rank, launch.local_size, gpus, elastic)
    if chosen is not None:
        cpus.bind_process(chosen)
    return why


def configure_threads(config, local_size: int) -> tuple[int, int]:
    """Sets intra/inter-op threads; several ranks per host split the cores."""
    import tensorflow as tf
    # The flags first; then env.py's one rule (TF's own variables, SLURM_CPUS_PER_TASK,
    # cores / local ranks).
    intra = config.intra_op_threads or env.default_intra_op_threads(local_size)
    inter = config.inter_op_threads or env.default_inter_op_threads(local_size)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        # TF already ran ops in this process (a notebook, a test session): its pools
        # are fixed now. Keep them and say so rather than fail the run.
        intra = tf.config.threading.get_intra_op_parallelism_threads()
        inter = tf.config.threading.get_inter_op_parallelism_threads()
        logging.warning("threads | TensorFlow already initialised; keeping intra %d inter %d "
                        "(0 = TF default) and its CPU allocator. Set threads before running "
                        "TF ops to change them.",
                        intra, inter)
    return intra, inter


def configure_determinism(config):
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()


def visible_gpus() -> int:
    """GPUs TensorFlow will use in this process (after any pinning)."""
    import tensorflow as tf
    return len(tf.config.list_logical_devices("GPU"))


def quiet_non_chief(is_chief: bool):
    """Only the chief talks; other ranks keep warnings and errors. Called again when
    an elastic ring re-forms, since the chief may then be another process."""
    if not is_chief:
        _lowered_from.setdefault("level", logging.get_verbosity())  # the user's --verbosity
        logging.set_verbosity(logging.WARNING)
    elif "level" in _lowered_from:  # a former non-chief became the chief: its level back
        logging.set_verbosity(_lowered_from.pop("level"))


# Kept only while this process is quieted, so a chief never holds on to a level it saw
# once (a second run in the same process, e.g. a test, keeps the verbosity it sets).
_lowered_from = {}
