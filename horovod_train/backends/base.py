"""The one interface between the training loop and a communication backend.

The loop is backend-blind: it calls these methods and nothing else. Defaults are the
single-process behaviour (no communication), so a backend overrides only what it
really does differently.
"""
import abc
import contextlib
import dataclasses

from horovod_train.data.sharding import ShardInfo


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


class Backend(abc.ABC):
    name: str = "base"

    def __init__(self):
        self.info = ProcessInfo()

    @abc.abstractmethod
    def setup(self) -> ProcessInfo:
        """Joins the job; returns where this process sits in it."""

    def scope(self):
        """Context in which models and optimizers must be built."""
        return contextlib.nullcontext()

    def distribute_dataset(self, dataset_fn):
        """dataset_fn(ShardInfo) -> tf.data.Dataset of this rank's batches."""
        return dataset_fn(ShardInfo(self.info.rank, self.info.size))

    def run_step(self, step_fn, *args):
        """Runs a compiled step on this rank's batch; returns its (reduced) outputs."""
        return step_fn(*args)

    def allreduce_gradients(self, grads):
        """Averages gradients over ranks (called inside the compiled step)."""
        return grads

    def apply_gradients(self, optimizer, grads, variables):
        """Applies already-reduced gradients (called inside the compiled step)."""
        optimizer.apply_gradients(zip(grads, variables))

    # False where the step can only run inside the backend's own run_step (mwms).
    supports_split_step = True

    def allreduce_mean(self, value):
        """Averages a tensor over ranks, eagerly (metrics and collective decisions)."""
        return value

    def broadcast_variables(self, variables):
        """Copies rank 0's values into `variables` (Keras 3 variables) on every rank."""

    def barrier(self):
        """Returns once every rank has called it."""

    def shutdown(self):
        """Leaves the job cleanly."""
