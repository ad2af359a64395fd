"""The in-graph mean over ranks for the optimizer wrapper (until backends own it)."""
import zlib

import tensorflow as tf

_MWMS_GROUP_KEY = 1_213_004_870  # far above the keys MWMS allocates (from 1 upwards)


def graph_reducer(backend):
    """grads -> their mean over ranks, inside the compiled train step."""
    if backend.info.size == 1:
        return list
    if backend.name == "mwms":
        return _MwmsMean(backend)
    return backend.allreduce_gradients  # horovod: one grouped allreduce (+compression)


class _MwmsMean:
    """CollectiveReduceV2 on the collective runtime MWMS configured, outside strategy.run.

    One op per dtype over the flattened gradients. Instance keys come from the dtype
    and size alone: every rank derives the same key in every trace (a retrace for a
    last partial batch included), and no two collectives in flight share one."""

    def __init__(self, backend):
        self.size = backend.info.size
        self.hint = {"ring": "ring", "nccl": "nccl"}.get(backend.collective, "auto")
        self.timeout = float(backend.timeout_s)
        self.wire = {"fp16": tf.float16, "bf16": tf.bfloat16}.get(backend.compression)

    def __call__(self, grads):
        grads = list(grads)
        out = [None] * len(grads)
        by_dtype = {}
        for i, g in enumerate(grads):
            by_dtype.setdefault(g.dtype, []).append(i)
        previous = []
        for dtype, idx in sorted(by_dtype.items(), key=lambda kv: kv[0].name):
            flat = tf.concat([tf.reshape(grads[i], [-1]) for i in idx], 0)
            wire = self.wire if self.wire is not None and dtype.is_floating else dtype
            with tf.control_dependencies(previous):  # one order on every rank
                reduced = tf.raw_ops.CollectiveReduceV2(
                    input=tf.cast(flat, wire), group_size=self.size, group_key=_MWMS_GROUP_KEY,
                    instance_key=self.instance_key(wire, flat.shape.num_elements()),
                    ordering_token=[], merge_op="Add", final_op="Div",
                    communication_hint=self.hint, timeout_seconds=self.timeout)
            previous = [reduced]
            parts = tf.split(tf.cast(reduced, dtype), [grads[i].shape.num_elements() for i in idx])
            for i, part in zip(idx, parts):
                out[i] = tf.reshape(part, tf.shape(grads[i]))
        return out

    @staticmethod
    def instance_key(dtype, count):
        return 1 + zlib.crc32(f"grads/{dtype.name}/{count}".encode()) % (2 ** 30)

