"""The communicator: the one place a backend's collectives live.

Every backend has one (`backend.comm`, made in setup()); the training loop, the Keras
drop-in, Horovod's API by Horovod's names, metric gathering and the divergence checks
all reach other ranks through it and nothing else. This base class is the one-process
behaviour: a collective over one rank returns its input (times the scale factors). A
backend subclasses it in its own module (horovod_comm.py, mwms_comm.py), and what a
backend cannot do raises `unsupported`, naming the backend.

Every method works eagerly and inside a tf.function, and every rank must call them in
the same order with the same shapes (allgather: the same shape but for the first
dimension). `compression` ("none", "fp16", "bf16": contract.COMPRESSIONS) is the dtype
floating tensors travel in; they come back in their own.
"""
import enum
import pickle

import numpy as np
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
# The dtype a scale factor is applied in, where it is not the tensor's own.
SCALE_DTYPES = {tf.float16: tf.float32, tf.bfloat16: tf.float32}
# What floating tensors travel as, per compression name.
WIRE_DTYPES = {"fp16": tf.float16, "bf16": tf.bfloat16}


def wire_dtype(dtype, compression: str | None):
    """The dtype a tensor of `dtype` travels in under `compression`."""
    if dtype.is_floating and compression in WIRE_DTYPES:
        return WIRE_DTYPES[compression]
    return dtype


def wire_bytes(tensors, compression: str | None) -> int:
    """Bytes one rank hands to the collective for `tensors` (static shapes)."""
    return sum(t.shape.num_elements() * wire_dtype(t.dtype, compression).size for t in tensors)


def split_sizes(first_dim: int, size: int) -> list[int]:
    """How reducescatter splits the first dimension: as evenly as possible, the lower
    ranks taking one more row when it does not divide."""
    base, extra = divmod(first_dim, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


class Communicator:
    """One process: every collective is the identity (times the scale factors)."""

    # Whether the collectives reach other processes; False here, whatever info.size
    # says (a test may claim a ring of two in one process): a check that compares
    # ranks must not run, since a gathered table would hold only this rank's row.
    reaches_peers = False
    # Whether reducescatter moves 1/N of an allreduce's bytes to each rank (a native
    # reduce-scatter); --shard_optimizer_state needs it. One process moves nothing.
    native_reducescatter = True

    def __init__(self, backend):
        self.backend = backend

    @property
    def info(self):
        return self.backend.info  # read at each call: an elastic ring can re-form

    def unsupported(self, what: str, fix: str) -> UsageError:
        return UsageError(f"{what}: received a call under the {self.backend.name!r} backend, "
                          f"which cannot do it; expected the horovod backend (horovodrun, "
                          f"mpirun or srun). Fix: {fix}")

    # ---- reductions ------------------------------------------------------------
    def allreduce(self, tensor, op: ReduceOp = ReduceOp.AVERAGE, prescale=1.0, postscale=1.0,
                  compression=None):
        return self.grouped_allreduce([tensor], op, prescale, postscale, compression)[0]

    def grouped_allreduce(self, tensors, op: ReduceOp = ReduceOp.AVERAGE, prescale=1.0,
                          postscale=1.0, compression=None) -> list:
        """One reduction of a list of tensors; floating ones travel as `compression`."""
        self.check_op(op)
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if not tensors:
            return []
        if not self.reaches_peers:  # nothing travels, so nothing is cast for the trip
            return self._reduce(tensors, op, prescale, postscale)
        sent = [tf.cast(t, wire_dtype(t.dtype, compression)) for t in tensors]
        reduced = self._reduce(sent, op, prescale, postscale)
        return [tf.cast(r, t.dtype) for r, t in zip(reduced, tensors)]

    def _reduce(self, tensors, op: ReduceOp, prescale, postscale) -> list:
        """The backend's reduction of same-order, wire-typed tensors."""
        return [scaled(scaled(t, prescale), postscale) for t in tensors]

    def reducescatter(self, tensor, op: ReduceOp = ReduceOp.AVERAGE):
        self.check_op(op)
        return tf.convert_to_tensor(tensor)

    def check_op(self, op: ReduceOp):
        if op is ReduceOp.ADASUM:
            raise self.unsupported("op=hvd.Adasum", "use op=hvd.Average (Adasum needs the "
                                   "horovod backend)")

    # ---- data movement ---------------------------------------------------------
    def allgather(self, tensor):
        """Rows of every rank, concatenated in rank order; the row counts may differ."""
        return tf.convert_to_tensor(tensor)

    def alltoall(self, tensor, splits=None, name=None):
        """(rows received, their count from each rank): rank r sends splits[d] rows of
        `tensor` to rank d, in order; splits=None splits the first dimension evenly.
        Written once over allgather, so every backend has it: each rank gathers every
        rank's rows and keeps those sent to it (size x the bytes of a native
        all-to-all, which a backend that has one overrides). `name` matches the ranks'
        ops where the library matches by name (Horovod in graph mode)."""
        tensor = tf.convert_to_tensor(tensor)
        size, rank = self.info.size, self.info.rank
        splits = even_splits(tensor, size) if splits is None else tf.cast(
            tf.reshape(splits, [size]), tf.int32)
        if size == 1:
            return tensor, splits
        table = tf.reshape(self.allgather(tf.reshape(splits, [1, size])), [size, size])
        rows = self.allgather(tensor)  # every rank's rows, in rank order
        first = (tf.cumsum(tf.reduce_sum(table, 1), exclusive=True)
                 + tf.cumsum(table, 1, exclusive=True)[:, rank])
        counts = table[:, rank]  # what each rank sent to this one
        return tf.gather(rows, tf.ragged.range(first, first + counts).flat_values), counts

    def join(self):
        """Horovod's join: this rank has no more data; returns the last rank to join.
        One process: it is the last."""
        return tf.constant(self.info.rank, tf.int32)

    def broadcast(self, tensor, root_rank: int):
        return self.grouped_broadcast([tensor], root_rank)[0]

    def grouped_broadcast(self, tensors, root_rank: int) -> list:
        self.check_root(root_rank)
        return [tf.convert_to_tensor(t) for t in tensors]

    def broadcast_object(self, obj, root_rank: int = 0):
        """A picklable object from root_rank, on every rank (eagerly)."""
        self.check_root(root_rank)
        if self.info.size == 1:
            return obj
        mine = self.info.rank == root_rank
        payload = _pickled(obj) if mine else np.zeros(0, np.uint8)
        length = int(self.broadcast(tf.constant([payload.size], tf.int64), root_rank)[0])
        payload = payload if mine else np.zeros(length, np.uint8)
        data = self.broadcast(tf.constant(payload), root_rank).numpy()
        return obj if mine else pickle.loads(data.tobytes())

    def allgather_object(self, obj) -> list:
        """Every rank's picklable object, as a list in rank order (eagerly)."""
        if self.info.size == 1:
            return [obj]
        payload = _pickled(obj)
        lengths = self.allgather(tf.constant([payload.size], tf.int64)).numpy()
        data = self.allgather(tf.constant(payload)).numpy()
        bounds = np.cumsum([0, *lengths])
        return [pickle.loads(data[a:b].tobytes()) for a, b in zip(bounds[:-1], bounds[1:])]

    def check_root(self, root_rank):
        if not isinstance(root_rank, int) or not 0 <= root_rank < self.info.size:
            raise UsageError(f"root_rank: received {root_rank!r}; expected a rank from 0 to "
                             f"{self.info.size - 1}. Fix: pass root_rank=0")

    def broadcast_variables(self, variables, root_rank: int = 0):
        """Root's values into `variables` (Keras 3 or tf.Variables), on every rank;
        eager or inside a tf.function."""
        self.check_root(root_rank)
        variables = list(variables)
        values = self.grouped_broadcast([plain(v) for v in variables], root_rank)
        for variable, value in zip(variables, values):
            variable.assign(value)

    def barrier(self):
        """Returns once every rank has called it: a one-element sum, which no rank can
        finish before all have sent theirs."""
        if self.info.size > 1:
            self.allreduce(tf.zeros([1]), ReduceOp.SUM)

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


def _pickled(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()


def even_splits(tensor, size: int):
    """alltoall's splits when none are given: the first dimension in `size` equal parts."""
    rows = tensor.shape[0]
    if rows is not None and rows % size:
        raise UsageError(f"alltoall: received {rows} rows and no splits for {size} ranks; "
                         f"expected a first dimension divisible by the rank count. Fix: pass "
                         f"splits=[rows for rank 0, rank 1, ...] summing to {rows}")
    return tf.fill([size], tf.shape(tensor)[0] // size)


def scaled(tensor, factor):
    """tensor * factor, computed as Horovod does: 16-bit floats in float32, integers in
    float64 and truncated (a 0.5 cast to int32 first would be 0), others in their own
    dtype."""
    if factor == 1.0:
        return tensor
    math = SCALE_DTYPES.get(tensor.dtype, tensor.dtype if tensor.dtype.is_floating or
                            tensor.dtype.is_complex else tf.float64)
    if math == tensor.dtype:
        return tensor * tf.cast(factor, tensor.dtype)
    return tf.cast(tf.cast(tensor, math) * tf.cast(factor, math), tensor.dtype)


def plain(variable):
    """The tf.Variable a Keras 3 variable wraps (a tf.Variable is its own; its .value
    is a method)."""
    return variable if isinstance(variable, tf.Variable) else variable.value


def by_dtype(tensors) -> list[tuple]:
    """[(dtype, indices)] of `tensors`, in dtype-name order: the order every rank
    issues per-dtype collectives in."""
    groups = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return sorted(groups.items(), key=lambda kv: kv[0].name)


def packed(tensors, reduce_flat, keep_single_shape: bool = False) -> list:
    """reduce_flat applied to each dtype's tensors laid end to end, cut back into the
    tensors' shapes: one collective per dtype, elementwise the same as one per tensor.
    keep_single_shape: a dtype's only tensor goes as it is (Horovod then refuses ranks
    whose shapes differ, as it does for hvd.allreduce)."""
    out = [None] * len(tensors)
    for _, idx in by_dtype(tensors):
        if len(idx) == 1 and keep_single_shape:
            out[idx[0]] = reduce_flat(tensors[idx[0]])
            continue
        flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in idx], 0)
        reduced = reduce_flat(flat)
        for i, part in zip(idx, tf.split(reduced, [_count(tensors[i]) for i in idx])):
            out[i] = tf.reshape(part, tf.shape(tensors[i]))
    return out


def _count(tensor):
    """Elements of `tensor`: a Python int when its shape is static."""
    count = tensor.shape.num_elements()
    return tf.size(tensor) if count is None else count
