"""MWMS's collectives: raw collective ops on the runtime the strategy configured.

Every collective of the mwms backend goes through here - the train step's gradients,
the Keras drop-in's, eager means and broadcasts, gathers, Horovod's API - on one group
key and one instance-key scheme. None runs inside strategy.run: each worker is one
replica (one GPU at most, devices.pin_gpu), so a replica context would add nothing but
a second way to reduce.

Every collective here carries a flat 1-D tensor, so an op's shape is its element
count. What TF 2.21 does with instance keys decides the rest (found by running it):
  - the runtime remembers, per (group key, instance key), the first kind, dtype and
    shape it saw, eagerly and across tf.function calls alike; a later call with the
    same key and another shape aborts every collective of the process ("Collective
    ops is aborted by: Shape mismatch"), not just the one. Keys therefore include
    the kind, the dtype and the element count; where the count is only known when a
    tf.function runs (allgather's padded size, a dynamic batch), the key is computed
    from it at run time (instance_key is an input tensor).
  - the same key with the same shape is reusable: eagerly call after call (50 in a
    row), in every call of a tf.function, in every iteration of a while loop. Two
    ops of one traced function with the same signature still get distinct keys (an
    ordinal per traced graph), so neither can take the other's data.
  - a key of another group key is another namespace: ours is far above the ones
    MWMS allocates (from 1 up).
  - CollectiveGatherV2 of zero elements crashes the process (SIGSEGV) and of a
    scalar aborts it (a failed shape check): allgather never sends either.
  - reduce takes float16/bfloat16/32/64, int32/64; gather not bfloat16 nor bool.
    Broadcast and gather move data only, so they carry every dtype's bits as int32
    or int64; a reduction widens 8- and 16-bit integers to int32, uint32 to int64.

Inside a tf.function, TF's automatic control dependencies run CollectiveReduceV2 and
CollectiveGatherV2 in program order (they are stateful, not in its async list), so
every rank runs them in one order; broadcast is an exact integer SUM of the root's
bits and zeros elsewhere for that reason (CollectiveBcastSendV2/RecvV2 are left
unordered).
"""
import collections
import json
import os
import weakref
import zlib

import tensorflow as tf

from horovod_train.backends import comm
from horovod_train.backends.comm import ReduceOp, split_sizes
from horovod_train.errors import UsageError

GROUP_KEY = 1_213_004_871
_MERGE = {ReduceOp.AVERAGE: "Add", ReduceOp.SUM: "Add", ReduceOp.MIN: "Min",
          ReduceOp.MAX: "Max", ReduceOp.PRODUCT: "Mul"}
_REDUCIBLE = frozenset({tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64})
_WIDENED = {tf.int8: tf.int32, tf.uint8: tf.int32, tf.int16: tf.int32, tf.uint16: tf.int32,
            tf.uint32: tf.int64}
_SAME_SIZE_INT = {1: tf.int8, 2: tf.int16, 4: tf.int32, 8: tf.int64}
_PRIME = 2 ** 31 - 1  # folds of the count stay far inside int64
_ORDINALS = weakref.WeakKeyDictionary()  # traced graph -> Counter of tags


class MwmsComm(comm.Communicator):
    """Collectives over this job's workers; every rank calls them in one order."""

    reaches_peers = True
    # TF 2.21's CollectiveReduceScatterV2 has no CPU (ring) implementation ("Collective
    # Registry::Lookup did not find collective implementation"): reducescatter here is
    # an allreduce and a slice.
    native_reducescatter = False

    def __init__(self, backend, collective: str, timeout_s: float):
        super().__init__(backend)
        self._hint = {"ring": "ring", "nccl": "nccl"}.get(collective, "auto")
        self._timeout_s = float(timeout_s)

    # ---- reductions ------------------------------------------------------------
    def _reduce(self, tensors, op: ReduceOp, prescale, postscale) -> list:
        tensors = [comm.scaled(t, prescale) for t in tensors]
        if self.info.size > 1:
            final = "Div" if op is ReduceOp.AVERAGE else "Id"
            wide = [tf.cast(t, _reduce_dtype(t.dtype)) for t in tensors]
            reduced = self._reduce_grouped(wide, _MERGE[op], final, f"reduce/{op.value}")
            tensors = [tf.cast(r, t.dtype) for r, t in zip(reduced, tensors)]
        return [comm.scaled(t, postscale) for t in tensors]

    def reducescatter(self, tensor, op: ReduceOp = ReduceOp.AVERAGE):
        self.check_op(op)
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank == 0:
            raise UsageError("reducescatter: received a scalar; expected a tensor of rank 1 "
                             "or more (it splits the first dimension). Fix: pass "
                             "tf.reshape(x, [1]) or use allreduce")
        start, count = self._my_rows(tensor)
        return self.allreduce(tensor, op)[start:start + count]

    def _my_rows(self, tensor):
        """(first row, row count) of this rank's slice, by split_sizes' rule."""
        rank, size = self.info.rank, self.info.size
        if tensor.shape[0] is not None:
            sizes = split_sizes(tensor.shape[0], size)
            return sum(sizes[:rank]), sizes[rank]
        base, extra = tf.shape(tensor)[0] // size, tf.shape(tensor)[0] % size
        return rank * base + tf.minimum(rank, extra), base + tf.cast(rank < extra, tf.int32)

    # ---- data movement ---------------------------------------------------------
    def allgather(self, tensor):
        """Rows of every rank, concatenated in rank order; the row counts may differ."""
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank == 0:
            tensor = tf.reshape(tensor, [1])
        if self.info.size == 1:
            return tensor
        size, shape = self.info.size, tf.shape(tensor)
        rows = self._gather(shape[:1], "gather/rows")
        most, per_row = tf.reduce_max(rows), tf.reduce_prod(shape[1:])
        # Every rank sends a slot of the largest size, and at least one element even
        # with no rows anywhere: an empty gather crashes TF.
        used = most * per_row
        slot = tf.maximum(used, 1)
        bits = _bits(tensor)
        padded = tf.pad(bits, [[0, slot - tf.size(bits)]])
        gathered = tf.reshape(self._gather(padded, f"gather/{bits.dtype.name}"), [size, slot])
        rows_of = tf.reshape(gathered[:, :used], [size, most, per_row])
        kept = tf.boolean_mask(rows_of, tf.sequence_mask(rows, most))
        out_shape = tf.concat([[tf.reduce_sum(rows)], shape[1:]], 0)
        out = tf.reshape(_unbits(tf.reshape(kept, [-1]), tensor.dtype), out_shape)
        out.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]))
        return out

    def grouped_broadcast(self, tensors, root_rank: int) -> list:
        """The root's values bit for bit: an integer SUM of the root's bits and zeros
        from every other rank is exact for any dtype (-0.0 and NaNs included)."""
        self.check_root(root_rank)
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if self.info.size == 1:
            return tensors
        mine = self.info.rank == root_rank
        sent = [_bits(t) if mine else tf.zeros_like(_bits(t)) for t in tensors]
        summed = self._reduce_grouped(sent, "Add", "Id", f"bcast/{root_rank}")
        return [tf.reshape(_unbits(s, t.dtype), tf.shape(t)) for s, t in zip(summed, tensors)]

    def join(self):
        raise self.unsupported(
            "hvd.join", "give every rank the same number of steps (shard the data evenly, "
            "drop the remainder, or stop at the fewest: hvd.allreduce(steps, op=hvd.Min)); "
            "TensorFlow's collectives cannot stand in for a rank that has left")

    # ---- the library itself ----------------------------------------------------
    # facts(): the base's all-False; MWMS talks gRPC (ring) or NCCL inside TF, none of
    # Horovod's libraries.
    def cross(self) -> tuple[int, int]:
        """Hosts are TF_CONFIG's worker hosts in order of first appearance."""
        config = json.loads(os.environ["TF_CONFIG"])  # setup() wrote the resolved one
        workers = config["cluster"]["worker"]
        hosts = list(dict.fromkeys(w.rpartition(":")[0] for w in workers))
        return hosts.index(workers[config["task"]["index"]].rpartition(":")[0]), len(hosts)

    # ---- the collectives -------------------------------------------------------
    def _reduce_grouped(self, tensors, merge: str, final: str, tag: str) -> list:
        """One CollectiveReduceV2 per dtype over the flattened tensors, in dtype-name
        order (the same on every rank); results in the tensors' shapes."""
        def reduce_flat(flat):
            return tf.raw_ops.CollectiveReduceV2(
                input=flat, group_size=self.info.size, group_key=GROUP_KEY,
                instance_key=_key(f"{tag}/{flat.dtype.name}", flat), ordering_token=[],
                merge_op=merge, final_op=final, communication_hint=self._hint,
                timeout_seconds=self._timeout_s)
        return comm.packed(tensors, reduce_flat)

    def _gather(self, flat, tag: str):
        return tf.raw_ops.CollectiveGatherV2(
            input=flat, group_size=self.info.size, group_key=GROUP_KEY,
            instance_key=_key(tag, flat), ordering_token=[],
            communication_hint=self._hint, timeout_seconds=self._timeout_s)


def _key(tag: str, flat):
    """The same on every rank for the same call: from the tag, the call's ordinal
    among its graph's calls with that tag, and the element count (a tensor when it is
    known only at run time: the same arithmetic then runs in TF); never 0."""
    code = zlib.crc32(f"ops/{tag}/{_ordinal(tag)}".encode())
    count = flat.shape.num_elements()
    if count is None:
        count = tf.size(flat, out_type=tf.int64)
    key = 1 + (code * 1_000_003 + count) % _PRIME % (2 ** 30)
    return key if isinstance(key, int) else tf.cast(key, tf.int32)


def _ordinal(tag: str) -> int:
    """0 eagerly (calls run one after another); in a traced function, how many calls
    with this tag its outermost traced graph already holds. Kept per process, not per
    one
    communicator: every trace of every function starts from the same count."""
    if tf.executing_eagerly():
        return 0
    graph = tf.compat.v1.get_default_graph()
    while getattr(getattr(graph, "outer_graph", None), "building_function", False):
        graph = graph.outer_graph  # a tf.cond branch or an inner tf.function
    counts = _ORDINALS.setdefault(graph, collections.Counter())
    counts[tag] += 1
    return counts[tag] - 1


def _reduce_dtype(dtype):
    if dtype in _REDUCIBLE:
        return dtype
    if dtype in _WIDENED:
        return _WIDENED[dtype]
    raise UsageError(f"allreduce: received a {dtype.name} tensor under the 'mwms' backend; "
                     f"expected a float or integer dtype (bool, complex and uint64 do not "
                     f"reduce). Fix: tf.cast it to float32 or int64 first")


def _bits(tensor):
    """The tensor's bits, flat, as int32 or int64 (what the collectives carry)."""
    dtype = tensor.dtype
    if dtype == tf.bool:
        return tf.reshape(tf.cast(tensor, tf.int32), [-1])
    same = _SAME_SIZE_INT.get(dtype.size) if dtype.is_numeric else None
    if same is None:
        raise UsageError(f"broadcast/allgather: received a {dtype.name} tensor under the "
                         f"'mwms' backend; expected a bool or numeric dtype of at most 8 "
                         f"bytes. Fix: encode it as numbers first")
    as_int = tensor if dtype == same else tf.bitcast(tensor, same)
    return tf.reshape(tf.cast(as_int, tf.int64 if same == tf.int64 else tf.int32), [-1])


def _unbits(flat, dtype):
    """The inverse of _bits for a flat tensor of `dtype` values."""
    if dtype == tf.bool:
        return tf.cast(flat, tf.bool)
    same = _SAME_SIZE_INT[dtype.size]
    as_int = tf.cast(flat, same)
    return as_int if dtype == same else tf.bitcast(as_int, dtype)
