"""The one interface between the training loop and a communication backend.

The loop is backend-blind: it calls these methods and nothing else. Defaults are the
single-process behaviour (no communication), so a backend overrides only what it
really does differently. Its collectives live in one place, its communicator
(`self.comm`, backends/comm.py); the methods here that reduce, broadcast or wait are
thin functions over it, which no backend overrides.
"""
import abc
import dataclasses

from horovod_train.backends import buckets
from horovod_train.backends.comm import Communicator, ReduceOp, wire_bytes
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
    # Graph op types that move data between ranks (for counting them per step).
    collective_op_types = frozenset()

    # How gradients travel: bytes per bucket (backends/buckets.py; 0: one call after
    # backprop) and the compression name (contract.COMPRESSIONS).
    bucket_bytes: int = 0
    compression: str = "none"

    def __init__(self):
        self.info = ProcessInfo()
        self.comm = Communicator(self)  # setup() installs the backend's own
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
            self._fed[step_fn] = feed.fed_step(step_fn)
        return self._fed[step_fn](iterator, *args)

    def allreduce_gradients(self, grads, compression=None) -> list:
        """Averages gradients over ranks, in graph (the train step, the Keras drop-in)
        or eagerly; never inside an XLA-compiled function. One grouped allreduce per
        bucket, last layers first: each is issued as soon as backprop has produced its
        gradients, so the early buckets travel while the rest is computed; every rank
        builds the same buckets. Every rank gets the same values, so the finite check
        on them needs no further agreement. `compression` (None: the backend's own)."""
        grads = list(grads)
        compression = compression or self.compression
        sizes = [g.shape.num_elements() * g.dtype.size for g in grads]
        out = [None] * len(grads)
        for bucket in buckets.buckets(sizes, self.bucket_bytes):
            reduced = self.comm.grouped_allreduce([grads[i] for i in bucket], ReduceOp.AVERAGE,
                                                  compression=compression)
            for i, r in zip(bucket, reduced):
                out[i] = r
        self.wire_bytes_per_step = wire_bytes(grads, compression) if self.comm.reaches_peers else 0
        return out

    def step_graph_def(self, step_fn, *args):
        """The GraphDef one call of step_fn runs (for inspection and tests)."""
        return step_fn.get_concrete_function(*args).graph.as_graph_def()

    def allreduce_mean(self, value):
        """Averages a tensor over ranks (metrics and collective decisions)."""
        return self.comm.allreduce(value, ReduceOp.AVERAGE)

    def broadcast_variables(self, variables):
        """Copies rank 0's values into `variables` (Keras 3 variables) on every rank."""
        self.comm.broadcast_variables(list(variables), root_rank=0)

    def elastic_driver(self, owner):
        """What hvd.elastic's KerasState needs of an elastic runtime (host updates, the
        restart loop), or None: this backend cannot re-form its ring, so an elastic
        script runs once and a lost rank ends the job."""
        return None

    def barrier(self):
        """Returns once every rank has called it."""
        self.comm.barrier()
