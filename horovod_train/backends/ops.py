"""Tensor collectives for scripts: what Horovod's API offers beside the optimizer.

`backend.tensor_ops()` returns one of these. The training loop never uses them (it has
the Backend interface); horovod_train.keras's Horovod-named functions (hvd.allreduce,
hvd.allgather, ...) do. This base class is the one-process behaviour: a collective
over one rank returns its input. A backend subclasses it in its own module, and what
a backend cannot do raises `unsupported`, naming the backend.

Every method works eagerly and inside a tf.function, like Horovod's own ops, and every
rank must call them in the same order with the same shapes (allgather: the same shape
but for the first dimension).
"""
import enum

import tensorflow as tf

from horovod_train.errors import UsageError


class ReduceOp(enum.Enum):
    """How values from the ranks combine (Horovod's hvd.Average, hvd.Sum, ...)."""
    AVERAGE = "Average"
    SUM = "Sum"
    MIN = "Min"
    MAX = "Max"
    PRODUCT = "Product"
    ADASUM = "Adasum"

    def __repr__(self):
        return f"hvd.{self.value}"


# The facts a script can ask about the communication library (hvd.mpi_enabled(), ...).
FACT_NAMES = ("mpi_enabled", "mpi_built", "mpi_threads_supported", "gloo_enabled",
              "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built")
# The trainer's flag; why it is not called --timeline: config.ObserveConfig.horovod_timeline.
TIMELINE_FIX = ("run under the horovod backend, where the trainer's --horovod_timeline (with "
                "--run_dir) writes run_dir/timeline.json, or use TensorBoard's profiler")


def split_sizes(first_dim: int, size: int) -> list[int]:
    """How reducescatter splits the first dimension: as evenly as possible, the lower
    ranks taking one more row when it does not divide."""
    base, extra = divmod(first_dim, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


class TensorOps:
    """One process: every collective is the identity (times the scale factors)."""

    def __init__(self, backend):
        self.backend = backend

    @property
    def info(self):
        return self.backend.info

    def unsupported(self, what: str, fix: str) -> UsageError:
        return UsageError(f"{what}: received a call under the {self.backend.name!r} backend, "
                          f"which cannot do it; expected the horovod backend (horovodrun, "
                          f"mpirun or srun). Fix: {fix}")

    # ---- reductions ------------------------------------------------------------
    def allreduce(self, tensor, op: ReduceOp, prescale=1.0, postscale=1.0):
        return self.grouped_allreduce([tensor], op, prescale, postscale)[0]

    def grouped_allreduce(self, tensors, op: ReduceOp, prescale=1.0, postscale=1.0) -> list:
        self.check_op(op)
        return [_scaled(_scaled(tf.convert_to_tensor(t), prescale), postscale) for t in tensors]

    def reducescatter(self, tensor, op: ReduceOp):
        self.check_op(op)
        return tf.convert_to_tensor(tensor)

    def check_op(self, op: ReduceOp):
        if op is ReduceOp.ADASUM:
            raise self.unsupported("op=hvd.Adasum", "use op=hvd.Average (Adasum needs the "
                                   "horovod backend)")

    # ---- data movement ---------------------------------------------------------
    def allgather(self, tensor):
        return tf.convert_to_tensor(tensor)

    def broadcast(self, tensor, root_rank: int):
        self.check_root(root_rank)
        return tf.convert_to_tensor(tensor)

    def check_root(self, root_rank):
        if not isinstance(root_rank, int) or not 0 <= root_rank < self.info.size:
            raise UsageError(f"root_rank: received {root_rank!r}; expected a rank from 0 to "
                             f"{self.info.size - 1}. Fix: pass root_rank=0")

    def broadcast_variables(self, variables, root_rank: int):
        """Root's values into `variables` (Keras 3 or tf.Variables), on every rank;
        eager or inside a tf.function."""
        self.check_root(root_rank)
        variables = list(variables)
        values = self.grouped_broadcast([_plain(v) for v in variables], root_rank)
        for variable, value in zip(variables, values):
            variable.assign(value)

    def grouped_broadcast(self, tensors, root_rank: int) -> list:
        return [tf.convert_to_tensor(t) for t in tensors]

    # ---- the library itself ----------------------------------------------------
    def facts(self) -> dict:
        return dict.fromkeys(FACT_NAMES, False)

    def cross(self) -> tuple[int, int]:
        """(cross_rank, cross_size): this host's index and the number of hosts."""
        return 0, 1

    def shutdown(self):
        """Leaves the job where the library can (Horovod); others keep their runtime."""

    def start_timeline(self, file_path, mark_cycles=False):
        raise self.unsupported("start_timeline", TIMELINE_FIX)

    def stop_timeline(self):
        raise self.unsupported("stop_timeline", TIMELINE_FIX)


def _scaled(tensor, factor):
    return tensor if factor == 1.0 else tensor * tf.cast(factor, tensor.dtype)


def _plain(variable):
    """The tf.Variable a Keras 3 variable wraps (a tf.Variable is its own)."""
    return variable if isinstance(variable, tf.Variable) else variable.value
