"""A real collective op in one process, for the single-process tier's XLA checks.

TF's cross-worker all-reduce on a group of one returns its input, so a step that uses
it trains exactly like the local backend; but the op in the graph is the genuine
CollectiveReduceV2 that mwms runs, and TF 2.21's XLA refuses to compile it on CPU.
A step that let it into an XLA function fails when it runs, and the graph shows it."""
import itertools

import tensorflow as tf

from horovod_train.backends.local import LocalBackend

OP_TYPES = frozenset({"CollectiveReduceV2"})
# The collective runtime ties an instance key to one shape for the process's life: every
# traced op gets a key of its own.
_INSTANCE_KEYS = itertools.count(100)


def ring_of_one(grads):
    return [tf.raw_ops.CollectiveReduceV2(
        input=g, group_size=1, group_key=7, instance_key=next(_INSTANCE_KEYS),
        ordering_token=[], merge_op="Add", final_op="Id") for g in grads]


class RingOfOne(LocalBackend):
    """The local backend whose gradient reduction is one collective op per gradient."""
    collective_op_types = OP_TYPES

    def allreduce_gradients(self, grads):
        return ring_of_one(grads)
