"""tf.distribute.MultiWorkerMirroredStrategy behind the same interface.

Keras 3 `model.fit` under MWMS fails on TF 2.21 ("unsupported type PerReplica ... to
a Tensor"), so the loop drives the strategy itself: `strategy.run` for steps,
`distribute_datasets_from_function` over our own sharding for input.

Gradients: the step runs its gradients and their reduction in this worker's replica
context (run_replica: strategy.run), where allreduce_gradients is a cross-worker
all-reduce, and applies them after strategy.run has returned. There, outside any
strategy scope, a Keras 3 optimizer neither all-reduces (it SUMs over replicas when
called in a replica context) nor goes through merge_call (which fails in a
cross-replica context on CPUs): it updates each mirrored variable's local copy, which
XLA can compile. Every worker applies the same reduced gradients, so the finite check
needs no collective of its own.
"""
import contextlib
import json
import os
import zlib

import tensorflow as tf
from absl import logging

from horovod_train import devices
from horovod_train.backends import buckets
from horovod_train.backends import tf_config as tfc
from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.data.sharding import ShardInfo
from horovod_train.errors import check_choice, check_positive
from launch import contract

IMPLEMENTATIONS = {
    name: getattr(tf.distribute.experimental.CommunicationImplementation, name.upper())
    for name in contract.COLLECTIVES
}

# graph_mean's collectives: a group key far above the ones MWMS allocates (from 1 up).
GRAPH_MEAN_GROUP_KEY = 1_213_004_870


class MwmsBackend(Backend):
    name = "mwms"
    # The split step computes gradients as a call of its own, outside strategy.run.
    supports_split_step = False
    collective_op_types = frozenset({"CollectiveReduce", "CollectiveReduceV2",
                                     "CollectiveReduceV3", "CollectiveGather",
                                     "CollectiveGatherV2"})

    def __init__(self, collective: str = "auto", collective_timeout_s: float = 300.0,
                 port_base: int = contract.DEFAULT_MWMS_PORT_BASE, compression: str = "none",
                 bucket_mb: float | None = None):
        super().__init__()
        # TF packs the gradients itself, by the same rule as backends/buckets.py.
        self.bucket_bytes = buckets.mib_to_bytes(bucket_mb)
        check_choice("collective", collective, contract.COLLECTIVES)
        check_choice("compression", compression, contract.COMPRESSIONS)
        check_positive("collective_timeout_s", collective_timeout_s)
        self.compression = compression
        self.collective = collective
        self.timeout_s = collective_timeout_s
        self.port_base = port_base
        self.strategy = None
        self._compiled = {}

    @classmethod
    def options_from_config(cls, config, timeline_path=None) -> dict:
        rt = config.runtime
        return {"collective": rt.collective, "collective_timeout_s": rt.collective_timeout_s,
                "port_base": rt.mwms_port_base, "compression": config.speed.compression,
                "bucket_mb": config.speed.allreduce_bucket_mb}

    def describe(self) -> str:
        return (f"mwms (collective {self.collective}, timeout {self.timeout_s:g} s, "
                f"compression {self.compression}, {buckets.describe(self.bucket_bytes)})")

    def setup(self) -> ProcessInfo:
        config = tfc.resolve_tf_config(os.environ, self.port_base)
        os.environ["TF_CONFIG"] = json.dumps(config)
        workers, index = config["cluster"]["worker"], config["task"]["index"]
        local_rank, local_size = tfc.local_position(workers, index)
        # Before the strategy: it creates TF's devices, and MWMS makes one replica per
        # visible GPU, so pinning also keeps it at one GPU (one replica) per worker.
        self.gpu = devices.pin_gpu(local_rank, local_size, chief=index == 0)
        # Resolved once, so graph_mean's collectives use the strategy's implementation.
        requested = self.collective
        self.collective = devices.choose_collective(requested, 1 if self.gpu.uses_gpu else 0)
        if index == 0:
            logging.info("mwms  | collectives %s (--collective=%s, %s)", self.collective.upper(),
                         requested, "GPU" if self.gpu.uses_gpu else "no GPU")
        tfc.rendezvous(workers, index, self.timeout_s)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=IMPLEMENTATIONS[self.collective], timeout_seconds=self.timeout_s,
            bytes_per_pack=self.bucket_bytes)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        self.info = ProcessInfo(index, len(workers), local_rank, local_size)
        return self.info

    def scope(self):
        return self.strategy.scope()

    def keras_scope(self):
        # Keras 3 fit fails under MWMS's scope on TF 2.21 (PerReplica conversion), so
        # the drop-in's Keras stays undistributed and reduces through graph_mean.
        return contextlib.nullcontext()

    def distribute_dataset(self, dataset_fn):
        def fn(ctx: tf.distribute.InputContext):
            return dataset_fn(ShardInfo(ctx.input_pipeline_id, ctx.num_input_pipelines))
        return self.strategy.distribute_datasets_from_function(fn)

    def run_replica(self, fn, *args):
        outputs = self.strategy.run(fn, args=args)
        # Reduced values are the same on every replica of this worker: take the first.
        return tf.nest.map_structure(
            lambda v: self.strategy.experimental_local_results(v)[0], outputs)

    def allreduce_gradients(self, grads):
        # One batched all-reduce (MWMS packs the list, in buckets of bytes_per_pack,
        # last gradients first, each issued once computed) of the pre-divided gradients:
        # the SUM of g / n is the mean; compression casts what travels.
        scale = 1.0 / self.strategy.num_replicas_in_sync
        sent = [tf.cast(g * tf.cast(scale, g.dtype), self.wire_dtype(g)) for g in grads]
        self.wire_bytes_per_step = sum(g.shape.num_elements() * g.dtype.size for g in sent)
        summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)
        return [tf.cast(r, g.dtype) for r, g in zip(summed, grads)]

    def wire_dtype(self, g, compression=None):
        return {"none": g.dtype, "fp16": tf.float16,
                "bf16": tf.bfloat16}[compression or self.compression]

    def graph_mean(self, tensors, compression=None) -> list:
        """CollectiveReduceV2 on the collective runtime the strategy configured, outside
        strategy.run (where the Keras drop-in's train step runs).

        One op per dtype over the flattened tensors, issued in one order (dtype name) on
        every rank. Instance keys come from the dtype and size alone: every rank derives
        the same key in every trace (a retrace for a last partial batch included), and
        no two collectives in flight share one."""
        tensors = list(tensors)
        if self.info.size == 1:
            return tensors
        hint = {"ring": "ring", "nccl": "nccl"}.get(self.collective, "auto")
        out = [None] * len(tensors)
        by_dtype = {}
        for i, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(i)
        previous, wire_bytes = [], 0
        for dtype, idx in sorted(by_dtype.items(), key=lambda kv: kv[0].name):
            flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in idx], 0)
            wire = self.wire_dtype(flat, compression) if dtype.is_floating else dtype
            with tf.control_dependencies(previous):  # one order on every rank
                reduced = tf.raw_ops.CollectiveReduceV2(
                    input=tf.cast(flat, wire), group_size=self.info.size,
                    group_key=GRAPH_MEAN_GROUP_KEY,
                    instance_key=graph_mean_instance_key(wire, flat.shape.num_elements()),
                    ordering_token=[], merge_op="Add", final_op="Div",
                    communication_hint=hint, timeout_seconds=float(self.timeout_s))
            previous = [reduced]
            wire_bytes += flat.shape.num_elements() * wire.size
            sizes = [tensors[i].shape.num_elements() for i in idx]
            for i, part in zip(idx, tf.split(tf.cast(reduced, dtype), sizes)):
                out[i] = tf.reshape(part, tf.shape(tensors[i]))
        self.wire_bytes_per_step = wire_bytes
        return out

    def _replica_all_reduce(self, op, value):
        """All-reduce of one tensor from outside any step (metrics, broadcast)."""
        if "per_replica" not in self._compiled:
            # A compiled identity step turns the tensor into a per-replica value;
            # strategy.reduce then runs the cross-worker collective.
            self._compiled["per_replica"] = tf.function(
                lambda v: self.strategy.run(tf.identity, args=(v,)), reduce_retracing=True)
        return self.strategy.reduce(op, self._compiled["per_replica"](value), axis=None)

    def allreduce_mean(self, value):
        return self._replica_all_reduce(tf.distribute.ReduceOp.MEAN, value)

    def broadcast_variables(self, variables):
        """Rank 0's values everywhere, as an exact SUM of (value on rank 0, zeros elsewhere).

        MWMS already initialises mirrored variables from worker 0 when they are created;
        this is for state that changes afterwards (a restored checkpoint)."""
        is_root = self.info.rank == 0
        for variable in variables:
            mine = tf.identity(variable) if is_root else tf.zeros_like(variable)
            variable.assign(self._replica_all_reduce(tf.distribute.ReduceOp.SUM, mine))

    def barrier(self):
        self.allreduce_mean(tf.constant(0.0))

    def tensor_ops(self):
        from horovod_train.backends.mwms_ops import MwmsOps  # it imports this module
        return MwmsOps(self)


def graph_mean_instance_key(dtype, count) -> int:
    """The same on every rank for the same (dtype, element count); never 0."""
    return 1 + zlib.crc32(f"grads/{dtype.name}/{count}".encode()) % (2 ** 30)
