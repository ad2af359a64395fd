"""The communicator's pure parts in one process: packing by dtype, wire dtypes, and
the one-process behaviour the local backend relies on (nothing travels, nothing is
cast, nothing is counted as sent). The multi-rank behaviour is proven on real ranks:
tests/multiprocess/test_mwms_tensor_ops.py, test_hvd_api_ranks.py, test_horovod_ranks.py."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
from horovod_train.backends import comm  # noqa: E402
from horovod_train.backends.comm import Communicator, ReduceOp  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402


def test_packed_makes_one_call_per_dtype_in_dtype_name_order_and_restores_shapes():
    tensors = [tf.ones([2, 3]), tf.constant([1, 2], tf.int32), tf.fill([4], 2.0),
               tf.constant(5, tf.int32)]
    calls = []

    def reduce_flat(flat):
        calls.append((flat.dtype.name, int(tf.size(flat))))
        return flat * 10
    out = comm.packed(tensors, reduce_flat)
    assert calls == [("float32", 10), ("int32", 3)]
    assert [o.shape.as_list() for o in out] == [[2, 3], [2], [4], []]
    for o, t in zip(out, tensors):
        np.testing.assert_array_equal(o.numpy(), t.numpy() * 10)


def test_wire_dtype_casts_floating_tensors_only():
    assert comm.wire_dtype(tf.float32, "fp16") == tf.float16
    assert comm.wire_dtype(tf.float64, "bf16") == tf.bfloat16
    assert comm.wire_dtype(tf.int32, "fp16") == tf.int32
    assert comm.wire_dtype(tf.float32, "none") == tf.float32
    assert comm.wire_bytes([tf.zeros([10]), tf.zeros([3], tf.int64)], "fp16") == 10 * 2 + 3 * 8


def test_one_process_reduces_to_the_input_uncast_and_sends_nothing():
    backend = LocalBackend(compression="fp16")
    backend.setup()
    grads = [tf.constant([1.0 + 2 ** -20, 3.0]), tf.ones([2, 2])]
    out = backend.allreduce_gradients(grads)
    # fp16 would round 1 + 2^-20 to 1: with nobody to send to, nothing is cast.
    assert [o.numpy().tolist() for o in out] == [g.numpy().tolist() for g in grads]
    assert backend.wire_bytes_per_step == 0


def test_one_process_collectives_are_the_identity_times_the_scale_factors():
    backend = LocalBackend()
    backend.setup()
    c = backend.comm
    assert type(c) is Communicator and not c.reaches_peers
    assert c.allreduce(tf.constant(2.0), ReduceOp.SUM, prescale=3.0, postscale=0.5).numpy() == 3.0
    assert c.allgather(tf.constant([[1.0, 2.0]])).numpy().tolist() == [[1.0, 2.0]]
    v = tf.Variable([4.0])
    c.broadcast_variables([v], root_rank=0)
    assert v.numpy().tolist() == [4.0]
    c.barrier()  # returns at once with one rank
    with pytest.raises(Exception, match="root_rank: received 1; expected a rank from 0 to 0"):
        c.broadcast(tf.constant(1.0), 1)
    with pytest.raises(Exception, match="op=hvd.Adasum: received a call under the 'local'"):
        c.allreduce(tf.constant(1.0), ReduceOp.ADASUM)
