"""Batches fetched inside the compiled step, with the time the step waited for them.

Why in-graph: an eager `next(iterator)` costs about 1 ms on a busy CPU even when the
prefetch buffer is full (Python, eager dispatch, wrapping the tensors), a tenth of a
small model's step, and that time is spent with no step running. Inside the
tf.function the same fetch is one op: tens of microseconds when a batch is ready.

Why the synchronous op: `next(iterator)` in a graph is IteratorGetNext, which TF runs
on a background thread of its own and then hands back to the step's thread: two thread
hops per step, 68 us against 30 us for the same ready batch fetched by
IteratorGetNextSync on the step's own thread (docs/benchmarks.md, M6). The sync op
blocks its thread while the pipeline is empty, so it is used only where another
inter-op thread stays free to run the rest of the graph (and any tf.data function
that asks for one); elsewhere, and for iterators that are not plain tf.data
iterators (a distributed iterator under mwms), the step keeps `next`.

Why timestamps: with the fetch in the graph there is no Python clock around it. Two
tf.timestamp ops bracket the fetch, and the batch reaches the model only after the
second one, so the difference is exactly how long the step was blocked on input: the
"data wait" the loop reports. TF refuses tf.timestamp under op determinism
(--deterministic), so the loop fetches eagerly there; a py_function clock would work
but costs more (~0.6 ms a step) than the in-graph fetch saves.
"""
import os

import tensorflow as tf
from tensorflow.python.data.util import structure

# What IteratorGetNextSync needs of a tf.data iterator (OwnedIterator's own fields).
_ITERATOR_FIELDS = ("_iterator_resource", "_flat_output_types", "_flat_output_shapes",
                    "_element_spec")


def inter_op_threads() -> int:
    """The size of TF's inter-op pool: the configured count, or TF's default (one per
    CPU this process may run on)."""
    return tf.config.threading.get_inter_op_parallelism_threads() or \
        len(os.sched_getaffinity(0))


def fetches_inline(iterator) -> bool:
    """Whether the step fetches from `iterator` on its own thread (see the module's
    docstring): a plain tf.data iterator, and a spare inter-op thread."""
    return all(hasattr(iterator, f) for f in _ITERATOR_FIELDS) and inter_op_threads() >= 2


def next_batch(iterator):
    """The next element of `iterator`, in a tf.function; raises OutOfRangeError at the
    end, as next() does."""
    if not fetches_inline(iterator):
        return next(iterator)
    flat = tf.raw_ops.IteratorGetNextSync(iterator=iterator._iterator_resource,
                                          output_types=iterator._flat_output_types,
                                          output_shapes=iterator._flat_output_shapes)
    return structure.from_compatible_tensor_list(iterator._element_spec, flat)


def fetch_timed(iterator):
    """(batch, seconds waited) for the next element of `iterator`; call in a tf.function."""
    start = tf.timestamp()
    with tf.control_dependencies([start]):
        batch = next_batch(iterator)
    with tf.control_dependencies(tf.nest.flatten(batch)):
        waited = tf.timestamp() - start
    # The model starts only after the second clock: compute kernels queued ahead of
    # the timestamp op would otherwise count as waiting.
    with tf.control_dependencies([waited]):
        batch = tf.nest.map_structure(tf.identity, batch)
    return batch, waited


def fed_step(step_fn):
    """tf.function(iterator, *extra) -> (step_fn(x, y, *extra), seconds waited)."""
    def call(iterator, *extra):
        (x, y), waited = fetch_timed(iterator)
        return step_fn(x, y, *extra), waited
    return tf.function(call, autograph=False)  # plain graph code (see step.py's why)
