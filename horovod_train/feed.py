"""Batches fetched inside the compiled step, with the time the step waited for them.

Why in-graph: an eager `next(iterator)` costs about 1 ms on a busy CPU even when the
prefetch buffer is full (Python, eager dispatch, wrapping the tensors), a tenth of a
small model's step, and that time is spent with no step running. Inside the
tf.function the same fetch is one IteratorGetNext op: tens of microseconds when a
batch is ready.

Why timestamps: with the fetch in the graph there is no Python clock around it. Two
tf.timestamp ops bracket the IteratorGetNext, and the batch reaches the model only
after the second one, so the difference is exactly how long the step was blocked on
input: the "data wait" the loop reports. TF refuses tf.timestamp under op determinism
(--deterministic), so the loop fetches eagerly there; a py_function clock would work
but costs more (~0.6 ms a step) than the in-graph fetch saves.
"""
import tensorflow as tf


def fetch_timed(iterator):
    """(batch, seconds waited) for the next element of `iterator`; call in a tf.function."""
    start = tf.timestamp()
    with tf.control_dependencies([start]):
        batch = next(iterator)
    with tf.control_dependencies(tf.nest.flatten(batch)):
        waited = tf.timestamp() - start
    # The model starts only after the second clock: compute kernels queued ahead of
    # the timestamp op would otherwise count as waiting.
    with tf.control_dependencies([waited]):
        batch = tf.nest.map_structure(tf.identity, batch)
    return batch, waited


def fed_step(step_fn, run):
    """tf.function(iterator, *extra) -> (step_fn(x, y, *extra), seconds waited).

    `run(step_fn, args)` is how the backend calls a step (strategy.run for mwms)."""
    def call(iterator, *extra):
        (x, y), waited = fetch_timed(iterator)
        return run(step_fn, (x, y, *extra)), waited
    return tf.function(call)
