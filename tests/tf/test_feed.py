"""The in-graph fetch (feed.py): same batches as an eager next(), and a wait that is
the real time spent blocked on input."""
import time

import numpy as np
import pytest
import tensorflow as tf

from horovod_train import feed
from horovod_train.backends.local import LocalBackend



def _batches(count=6, delay_s=0.0):
    x = np.arange(count * 4 * 3, dtype=np.float32).reshape(count, 4, 3)
    y = np.arange(count * 4, dtype=np.int64).reshape(count, 4)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if delay_s:  # a slow input pipeline: every element takes delay_s to produce
        def slow(a, b):
            tf.py_function(lambda: time.sleep(delay_s), [], [])
            return a, b
        ds = ds.map(slow)
    return ds


@tf.function
def step(x, y, scale):
    return tf.reduce_sum(x) * scale, tf.cast(tf.reduce_sum(y), tf.float32)


def test_fed_step_sees_the_batches_eager_next_would_see_in_order():
    backend = LocalBackend()
    backend.setup()
    fed_iter, eager_iter = iter(_batches()), iter(_batches())
    for _ in range(6):
        (a, b), waited = backend.run_step_fed(step, fed_iter, tf.constant(2.0))
        x, y = next(eager_iter)
        want = step(x, y, tf.constant(2.0))
        assert float(a) == float(want[0]) and float(b) == float(want[1])
        assert 0.0 <= float(waited) < 1.0
    with pytest.raises(tf.errors.OutOfRangeError):
        backend.run_step_fed(step, fed_iter, tf.constant(2.0))


def test_the_wait_is_the_time_blocked_on_a_slow_pipeline():
    fed = feed.fed_step(step)
    ready = iter(_batches().prefetch(2))
    slow = iter(_batches(delay_s=0.05))
    fed(ready, tf.constant(1.0))  # tracing
    time.sleep(0.2)  # let the prefetch buffer fill
    quick_wait = float(fed(ready, tf.constant(1.0))[1])
    slow_waits = [float(fed(slow, tf.constant(1.0))[1]) for _ in range(3)]
    assert quick_wait < 0.01, quick_wait
    assert min(slow_waits) >= 0.045, slow_waits


def test_a_new_iterator_of_the_same_spec_reuses_the_compiled_step():
    """Elastic runs and resumes build new iterators: no retrace per iterator."""
    fed = feed.fed_step(step)
    for _ in range(3):
        fed(iter(_batches()), tf.constant(1.0))
    assert fed.experimental_get_tracing_count() == 1


def _fetch_ops(iterator) -> set:
    """The iterator ops in the graph of one traced fetch from `iterator`."""
    fn = tf.function(lambda it: feed.fetch_timed(it)[0])
    graph = fn.get_concrete_function(iterator).graph
    return {op.type for op in graph.get_operations() if op.type.startswith("IteratorGetNext")}


def test_a_tf_data_iterator_is_read_on_the_steps_own_thread():
    # This process runs TF's default inter-op pool: one thread per CPU, and the test
    # machines have at least two, so a spare thread stays free.
    assert feed.inter_op_threads() >= 2
    assert _fetch_ops(iter(_batches())) == {"IteratorGetNextSync"}


def test_with_no_spare_inter_op_thread_the_fetch_keeps_its_own_thread(monkeypatch):
    monkeypatch.setattr(feed, "inter_op_threads", lambda: 1)
    assert _fetch_ops(iter(_batches())) == {"IteratorGetNext"}


def test_the_inline_fetch_ends_as_next_does_at_the_end_of_the_data():
    it = iter(_batches(count=2))
    fetch = tf.function(lambda i: feed.fetch_timed(i)[0])
    got = [fetch(it)[1].numpy().tolist() for _ in range(2)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(tf.errors.OutOfRangeError):
        fetch(it)
