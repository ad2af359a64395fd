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
    """Options are the constructor's keyword arguments, typed, each backend its own;
    backends.create refuses any other. Every member the loop reads is declared here."""
    name: str = "base"
    # Bytes one rank put on the wire in the last traced gradient reduction (observe/).
    wire_bytes_per_step: int = 0
    # Where Horovod writes its timeline, or None: this backend writes none.
    timeline_path: str | None = None
    # False where the gradients must be computed inside run_replica (mwms).
    supports_split_step = True
    # Graph op types that move data between ranks (for counting them per step).
    collective_op_types = frozenset()

    def __init__(self):
        self.info = ProcessInfo()
        # Environment defaults setup() chose for ranks sharing CPU cores (logged once).
        self.chosen_env: dict[str, str] = {}
        self._fed = {}  # step_fn -> its compiled fetch-and-run (see run_step_fed)

    @classmethod
    def options_from_config(cls, config, timeline_path=None) -> dict:
        """The constructor's options, read from a RunConfig (the CLI's path)."""
        return {}

    def describe(self) -> str:
        """This backend and its options, for the resolved-config log line."""
        return self.name

    @abc.abstractmethod
    def setup(self) -> ProcessInfo:
        """Joins the job; returns where this process sits in it."""

    def scope(self):
        """Context in which models and optimizers must be built."""
        return contextlib.nullcontext()

    def keras_scope(self):
        """Where the Keras drop-in (model.fit, reducing through graph_mean) builds its
        model and optimizer: scope() unless a backend says otherwise."""
        return self.scope()

    def distribute_dataset(self, dataset_fn):
        """dataset_fn(ShardInfo) -> tf.data.Dataset of this rank's batches."""
        return dataset_fn(ShardInfo(self.info.rank, self.info.size))

    def run_step(self, step_fn, *args):
        """Runs a compiled step on this rank's batch; returns its (reduced) outputs."""
        return step_fn(*args)

    def run_step_fed(self, step_fn, iterator, *args):
        """Runs step_fn(x, y, *args) on the next batch of `iterator` (from
        distribute_dataset), fetched inside the compiled call (see feed.py).
        Returns (outputs as run_step returns them, seconds waited for the batch)."""
        if step_fn not in self._fed:
            from horovod_train import feed
            self._fed[step_fn] = feed.fed_step(step_fn, self._call_step)
        return self._fed[step_fn](iterator, *args)

    def _call_step(self, step_fn, args):
        """How a compiled step calls step_fn on its batch (inside its tf.function)."""
        return step_fn(*args)

    def run_replica(self, fn, *args):
        """Inside a compiled step: fn(*args) where this rank's collectives can run (mwms:
        its replica context); returns this rank's results as plain tensors."""
        return fn(*args)

    def allreduce_gradients(self, grads):
        """Averages gradients over ranks; called through run_replica inside the compiled
        step, never inside an XLA-compiled function. Every rank gets the same values,
        so the finite check on them needs no further agreement."""
        return grads

    def step_graph_def(self, step_fn, *args):
        """The GraphDef one call of step_fn runs (for inspection and tests)."""
        return step_fn.get_concrete_function(*args).graph.as_graph_def()

    def allreduce_mean(self, value):
        """Averages a tensor over ranks, eagerly (metrics and collective decisions)."""
        return value

    def graph_mean(self, tensors, compression=None) -> list:
        """Averages tensors over ranks from inside a plain tf.function, outside any
        replica context (the Keras drop-in's train step); `compression` (a name in
        contract.COMPRESSIONS, None: the backend's own) applies as in
        allreduce_gradients. Every rank must call it with the same shapes, in the same
        order. One process: the tensors themselves."""
        return list(tensors)

    def broadcast_variables(self, variables):
        """Copies rank 0's values into `variables` (Keras 3 variables) on every rank."""

    def elastic_driver(self, owner):
        """What hvd.elastic's KerasState needs of an elastic runtime (host updates, the
        restart loop), or None: this backend cannot re-form its ring, so an elastic
        script runs once and a lost rank ends the job."""
        return None

    def tensor_ops(self):
        """The tensor collectives scripts call by Horovod's names (backends/ops.py);
        not used by the training loop."""
        from horovod_train.backends.ops import TensorOps
        return TensorOps(self)

    def barrier(self):
        """Returns once every rank has called it."""
