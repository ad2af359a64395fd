"""The optimizer's state sharded across ranks (--shard_optimizer_state, ZeRO stage 1).

Each rank keeps the optimizer's slots (Adam's two moments, SGD's momentum) for its
shard of the parameters only: one flat float32 variable per bucket (`pieces`), holding
the elements of it shard_layout.py assigns this rank, on which the Keras optimizer is
built and applied. (Per bucket, not one flat variable: the optimizer's temporaries are
each the size of the variable it updates, and a whole shard's took decoder_lm_124m's
step ~0.4 GB above the unsharded one's.) A step:

  1. the gradients (accumulated as always) are reduce-scattered per bucket: each rank
     receives the mean of its slice of every bucket (`scatter`);
  2. the finite verdict on the unscaled shard is one rank's; the ranks agree on it
     through one small allreduce, with the stop vote riding along (`agree`);
  3. the pieces are read from the parameters (`refresh`; they are the same on every
     rank) and the optimizer applies their gradients (update.apply_update);
  4. one allgather per bucket brings every rank every updated element (`gather`).
Elementwise optimizers (Adam, SGD with momentum) compute exactly what they compute
unsharded; the reductions' order is what may differ (float32 rounding).

Checkpoints hold the full state, named as an unsharded run names it: checkpoint_state()
stands a GatheredSlot in for each variable's slot, filled on the chief by gather_state()
(a collective: every rank) before it writes, and cut back into the shards by
scatter_restored() after a restore. So a sharded checkpoint resumes unsharded, on another
world size, or sharded.
"""
import bisect
import contextlib
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from horovod_train import shard_layout
from horovod_train.backends.comm import ReduceOp
from horovod_train.errors import UsageError

SHARD_NAME = "optimizer_shard"
# The largest bucket: its gradients laid end to end and its gathered parameters are
# transient copies, which this bounds; and Horovod refuses a reduce-scatter with a
# prescale larger than its fusion buffer, 128 MiB by default ("The fusion buffer is not
# large enough to hold the input tensor"), should one ever be used here again.
MAX_BUCKET_BYTES = 64 * 2 ** 20


class GatheredSlot:
    """One variable's optimizer slot in full, as a checkpoint sees it: its unsharded
    name and shape, the gathered value (np.asarray) and an assign() that keeps a
    restored value until scatter_restored() cuts it into the shards."""

    def __init__(self, path: str, shape, kind: str, variable: int):
        self.path, self.shape, self.kind, self.variable = path, tuple(shape), kind, variable
        self.array = None

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype, copy=bool(copy))

    def assign(self, value):
        self.array = np.asarray(value, np.float32)


class OptimizerShards:
    def __init__(self, variables, optimizer, backend, bucket_bytes: int):
        self.variables, self.optimizer, self.backend = list(variables), optimizer, backend
        odd = [v.path for v in self.variables if v.dtype != "float32"]
        if odd:
            raise UsageError(f"--shard_optimizer_state: received trainable variables of other "
                             f"dtypes than float32 ({', '.join(odd[:3])}); expected float32 "
                             f"variables (mixed precision keeps them so). Fix: drop "
                             f"--shard_optimizer_state for this model")
        if not backend.comm.native_reducescatter:
            raise backend.comm.unsupported(
                "--shard_optimizer_state", "drop --shard_optimizer_state, or launch with "
                "horovodrun/mpirun/srun (this backend's collectives cannot reduce-scatter: "
                "its reduce-scatter is a whole allreduce)")
        info = backend.info
        bucket_bytes = min(bucket_bytes, MAX_BUCKET_BYTES) if bucket_bytes > 0 \
            else MAX_BUCKET_BYTES
        self.layout = shard_layout.layout([tuple(v.shape) for v in self.variables], info.size,
                                          bucket_bytes)
        # This rank's segments of each bucket, placed in the bucket's piece.
        starts = self.layout.shard_starts()
        self.segments = [[] for _ in self.layout.buckets]
        for seg in self.layout.segments(info.rank):
            k = bisect.bisect_right(starts, seg.at) - 1
            self.segments[k].append(dataclasses.replace(seg, at=seg.at - starts[k]))
        self.pieces = [keras.Variable(np.zeros(b.slice, np.float32), name=f"{SHARD_NAME}_{k}")
                       for k, b in enumerate(self.layout.buckets)]
        optimizer.build(self.pieces)
        # {kind: [its slot of each piece]}: 'momentum', 'velocity', ...
        self.slots = {}
        for v in optimizer.variables:
            if (place := _slot_place(v, optimizer)) is not None:
                self.slots.setdefault(place[1], [None] * len(self.pieces))[place[0]] = v
        self.shared = [v for v in optimizer.variables if _slot_place(v, optimizer) is None]
        self.gathered = _gathered_slots(self.variables, optimizer, self.shared)
        self.wire_bytes = sum(b.padded for b in self.layout.buckets) * 4
        self._refresh = tf.function(self._read_shard, autograph=False)

    # ---- the step ----------------------------------------------------------------
    def scatter(self, grads):
        """This rank's slice of every bucket's mean gradient: its pieces' gradients.
        A bucket is laid end to end only once the previous one's reduce-scatter is
        done, so the copy alive beside the gradients is one bucket, not all of them."""
        pieces = []
        for bucket in self.layout.buckets:
            with tf.control_dependencies(pieces[-1:]):
                flat = [tf.reshape(tf.cast(grads[i], tf.float32), [-1]) for i in bucket.members]
                flat.append(tf.zeros([bucket.padded - bucket.used], tf.float32))
                laid = tf.concat(flat, 0)
            pieces.append(self.backend.comm.reducescatter(laid, ReduceOp.AVERAGE))
        self.backend.wire_bytes_per_step = self.wire_bytes if self.backend.comm.reaches_peers \
            else 0
        return pieces

    def agree(self, finite, riders):
        """(every rank's shard finite, the riders averaged over ranks): one allreduce."""
        values = tf.concat([tf.reshape(1.0 - tf.cast(finite, tf.float32), [1]),
                            *[tf.reshape(tf.cast(r, tf.float32), [-1]) for r in riders]], 0)
        mean = self.backend.allreduce_mean(values)
        return tf.equal(mean[0], 0.0), mean[1:]

    def refresh(self):
        """The pieces from the parameters (the same on every rank after each gather, a
        broadcast or a restore), padding zero. In a function of its own: which slices
        it takes depends on the rank, and Horovod matches a traced step's collectives
        across ranks by their names, which TF numbers in the order ops are made; here
        every rank adds one call op to the caller's graph."""
        self._refresh()

    def _read_shard(self):
        for piece, segments in zip(self.pieces, self.segments):
            parts, at = [], 0
            for seg in segments:
                if seg.at > at:
                    parts.append(tf.zeros([seg.at - at], tf.float32))
                flat = tf.reshape(tf.convert_to_tensor(self.variables[seg.variable]), [-1])
                parts.append(flat[seg.start:seg.stop])
                at = seg.at + seg.stop - seg.start
            if at < piece.shape[0]:
                parts.append(tf.zeros([piece.shape[0] - at], tf.float32))
            piece.assign(tf.concat(parts, 0) if len(parts) > 1 else parts[0])
        return tf.constant(True)

    def gather(self):
        """Every rank's updated slices into the parameters, one allgather per bucket,
        each once the previous bucket has arrived (one or two buckets alive, not all)."""
        previous = []
        for bucket, piece in zip(self.layout.buckets, self.pieces):
            with tf.control_dependencies(previous):
                full = self.backend.comm.allgather(tf.convert_to_tensor(piece))
            previous = [full]
            for i, off, size in zip(bucket.members, bucket.offsets, bucket.sizes):
                variable = self.variables[i]
                variable.assign(tf.reshape(full[off:off + size], variable.shape))

    # ---- what it holds -----------------------------------------------------------
    def facts(self) -> dict:
        """Optimizer-state bytes per rank and unsharded, the padding, the shard's own
        parameter copy: for the config line and the summary."""
        return dict(shard_layout.state_bytes(self.layout, len(self.slots)),
                    optimizer_state_buckets=len(self.layout.buckets))

    def describe(self) -> str:
        f = self.facts()
        return (f"optimizer state sharded: {f['optimizer_state_bytes_per_rank'] / 2 ** 20:.2f} "
                f"MiB per rank of {f['optimizer_state_bytes_unsharded'] / 2 ** 20:.2f} MiB "
                f"unsharded ({len(self.layout.buckets)} buckets, "
                f"{f['optimizer_state_padding_elements']} padding elements)")

    # ---- checkpoints ---------------------------------------------------------------
    def checkpoint_state(self) -> list:
        """The optimizer's variables as an unsharded run lists them (names, order, full
        shapes): the shared ones themselves, each slot a GatheredSlot."""
        return list(self.gathered)

    def broadcastable(self, variables) -> list:
        """`variables` without the GatheredSlots (scatter_restored places those)."""
        return [v for v in variables if not isinstance(v, GatheredSlot)]

    def gather_state(self):
        """Every rank (eagerly): each slot's shards into the chief's GatheredSlots, by
        one alltoall per slot and bucket that sends every rank's slice to rank 0 alone.
        The other ranks never hold more than their shard; an allgather would give each
        of them the whole state at every checkpoint. release_state() drops it after."""
        comm, info = self.backend.comm, self.backend.info
        for kind, slots in self.slots.items():
            flat = {}
            for bucket, slot in zip(self.layout.buckets, slots):
                to_chief = [bucket.slice] + [0] * (info.size - 1)
                full, _ = comm.alltoall(tf.convert_to_tensor(slot), to_chief)
                if info.is_chief:
                    full = full.numpy()
                    for i, off, size in zip(bucket.members, bucket.offsets, bucket.sizes):
                        flat[i] = full[off:off + size]
            if info.is_chief:
                for g in self.gathered:
                    if isinstance(g, GatheredSlot) and g.kind == kind:
                        g.array = flat[g.variable].reshape(g.shape) if g.variable in flat \
                            else np.zeros(g.shape, np.float32)

    def release_state(self):
        """Drops the chief's gathered state once written (it is the whole state)."""
        for g in self.gathered:
            if isinstance(g, GatheredSlot):
                g.array = None

    def scatter_restored(self):
        """Every rank, after a restore (the chief's GatheredSlots hold the values):
        each slot's values broadcast from rank 0, this rank's elements kept."""
        comm, chief = self.backend.comm, self.backend.info.is_chief
        for kind, slots in self.slots.items():
            pieces = [np.zeros(p.shape, np.float32) for p in self.pieces]
            for g in self.gathered:
                if not (isinstance(g, GatheredSlot) and g.kind == kind):
                    continue
                mine = g.array if chief else np.zeros(g.shape, np.float32)
                full = comm.broadcast(tf.constant(mine), 0).numpy().reshape(-1)
                for piece, segments in zip(pieces, self.segments):
                    for seg in segments:
                        if seg.variable == g.variable:
                            piece[seg.at:seg.at + seg.stop - seg.start] = full[seg.start:seg.stop]
                g.array = None
            for slot, piece in zip(slots, pieces):
                slot.assign(piece)


def _slot_place(variable, optimizer) -> tuple[int, str] | None:
    """(piece, kind) of a piece's slot, e.g. (3, 'momentum') for the slot named
    <optimizer>/optimizer_shard_3_momentum; None for the optimizer's own variables
    (iteration, learning rate)."""
    prefix = f"{optimizer.name}/{SHARD_NAME}_"
    if not variable.path.startswith(prefix):
        return None
    piece, kind = variable.path[len(prefix):].split("_", 1)
    return int(piece), kind


def _gathered_slots(variables, optimizer, shared) -> list:
    """The unsharded optimizer's variables, in its order and by its names: read from a
    copy of the optimizer built on empty stand-ins with the variables' paths (so it
    allocates nothing), each slot replaced by a GatheredSlot, the rest by our own."""
    stand_ins = [_stand_in(v.path) for v in variables]
    config = optimizer.get_config()
    if isinstance(config["learning_rate"], dict):  # a schedule: the object, unserialized
        config["learning_rate"] = optimizer._learning_rate  # noqa: SLF001
    twin = optimizer.__class__.from_config(config)
    twin.build(stand_ins)
    own = {v.path: v for v in shared}
    prefix = f"{optimizer.name}/"
    slot_of = {}
    for i, s in enumerate(stand_ins):
        base = prefix + s.path.replace("/", "_") + "_"
        slot_of[base] = i
    out = []
    for w in twin.variables:
        if w.path in own:
            out.append(own[w.path])
            continue
        match = [(base, i) for base, i in slot_of.items() if w.path.startswith(base)]
        if not match:
            raise UsageError(f"--shard_optimizer_state: received optimizer variable {w.path!r}, "
                             f"which is neither a per-variable slot nor shared; expected an "
                             f"elementwise optimizer (adam, sgd). Fix: drop "
                             f"--shard_optimizer_state")
        base, i = max(match, key=lambda m: len(m[0]))
        out.append(GatheredSlot(w.path, variables[i].shape, w.path[len(base):], i))
    return out


def _stand_in(path: str):
    """An empty variable whose path is `path` (a Keras name may not hold '/')."""
    *parents, name = path.split("/")
    with contextlib.ExitStack() as scopes:
        for parent in parents:
            scopes.enter_context(keras.name_scope(parent))
        return keras.Variable(np.zeros((0,), np.float32), name=name)
