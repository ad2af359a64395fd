"""Issue 40: Horovod's TensorFlow API (`horovod_train.tensorflow`) in one process: its
names and horovod.tensorflow's signatures, the tape's gradients (eager and in a
tf.function, dense, sparse, local sources), and the refusals. Multi-rank behaviour is
tests/multiprocess/test_horovod_tape_ranks.py's."""
import inspect

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import horovod_train.tensorflow as hvd  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402
from horovod_train.keras import state  # noqa: E402


def test_every_name_is_there_with_horovods_parameters():
    """Each name exists; where Horovod is installed, each function's parameters are
    horovod.tensorflow's, in its order (a positional call means the same), ours may add
    keyword-only ones after them."""
    assert [n for n in hvd.HOROVOD_NAMES if not hasattr(hvd, n)] == []
    for name in ("TensorFlowKerasState", "TensorFlowState", "ObjectState", "run"):
        assert hasattr(hvd.elastic, name), name
    theirs = pytest.importorskip("horovod.tensorflow")
    differ = []
    for name in hvd.HOROVOD_NAMES:
        ours, their = getattr(hvd, name), getattr(theirs, name, None)
        if not inspect.isfunction(ours) or not inspect.isfunction(their):
            continue
        if any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(their).parameters.values()):
            continue  # init(*args, **kwargs): its parameters are its library's
        positional = [p.name for p in inspect.signature(ours).parameters.values()
                      if p.kind is not p.KEYWORD_ONLY and p.kind is not p.VAR_KEYWORD]
        wanted = [p for p in inspect.signature(their).parameters
                  if p not in ("args", "kwargs")]
        if positional != wanted:
            differ.append(f"{name}: ours {positional}, Horovod's {wanted}")
    assert differ == []


def _model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])


def _loss(model, x, y):
    return tf.reduce_mean((model(x) - y) ** 2)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_one_process_tape_returns_the_plain_tapes_gradients(joined, compiled):
    model, x, y = _model(), tf.random.uniform([8, 4], seed=1), tf.random.uniform([8, 1], seed=2)

    def both():
        with tf.GradientTape() as plain_tape:
            loss = _loss(model, x, y)
        expected = plain_tape.gradient(loss, model.trainable_variables)
        with tf.GradientTape() as tape:
            loss = _loss(model, x, y)
        tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16)
        assert isinstance(tape, tf.GradientTape)
        return expected, tape.gradient(loss, model.trainable_variables)
    expected, got = tf.function(both)() if compiled else both()
    assert len(got) == len(expected) == 4
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e.numpy(), g.numpy())


def test_sparse_gradients_stay_sparse_unless_asked_dense_and_local_layers_stay_local(joined):
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(10, 3),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    ids = np.array([[1, 2]])

    def grads(**kwargs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(ids))
        return hvd.PartialDistributedGradientTape(tape, **kwargs).gradient(
            loss, model.trainable_variables)
    sparse, dense = grads(), grads(sparse_as_dense=True)
    assert isinstance(sparse[0], tf.IndexedSlices) and not isinstance(dense[0], tf.IndexedSlices)
    np.testing.assert_array_equal(tf.convert_to_tensor(sparse[0]).numpy(), dense[0].numpy())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(ids))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=model.layers[-1])
    local, shared = tape.get_local_and_global_gradients(loss, model.trainable_variables)
    assert [v.path for v, _ in local] == [v.path for v in model.layers[-1].trainable_weights]
    assert len(shared) == 1


def test_tensor_collectives_in_one_process(joined):
    rows = tf.reshape(tf.range(6.0), [6, 1])
    assert hvd.alltoall(rows).numpy().ravel().tolist() == list(range(6))
    received, counts = hvd.alltoall(rows, splits=[6])
    assert counts.numpy().tolist() == [6] and received.shape == (6, 1)
    assert [t.shape for t in hvd.grouped_allgather([rows, rows[:2]])] == [(6, 1), (2, 1)]
    assert hvd.grouped_reducescatter([rows], op=hvd.Sum)[0].shape == (6, 1)
    var = tf.Variable([1.0, 2.0])
    assert hvd.broadcast_([var], root_rank=0)[0].numpy().tolist() == [1.0, 2.0]
    assert int(hvd.join()) == 0 and int(hvd.size_op()) == 1 and hvd.is_homogeneous()
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]), tf.constant([3, 2]))
    assert isinstance(hvd.allreduce(slices), tf.IndexedSlices)
    hvd.barrier()


def test_refusals_name_the_fix(joined):
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(UsageError, match=r"received list; expected a tf.GradientTape"):
        hvd.DistributedGradientTape([tape])
    with pytest.raises(UsageError, match="op: received hvd.Adasum"):
        hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    with pytest.raises(UsageError, match="process_set"):
        hvd.DistributedGradientTape(tape, process_set=object())
    with pytest.raises(UsageError, match="local_layers: received int"):
        hvd.PartialDistributedGradientTape(tape, local_layers=[3])
    with pytest.raises(UsageError, match=r"alltoall: received 5 rows and no splits for 2 ranks"):
        from horovod_train.backends.comm import even_splits
        even_splits(tf.zeros([5]), 2)
    with pytest.raises(UsageError, match="received a session"):
        hvd.elastic.TensorFlowState(session=object())


def test_a_call_before_init_says_to_call_init():
    state.reset()
    with tf.GradientTape() as tape:
        x = tf.constant(1.0)
        tape.watch(x)
        y = x * x
    with pytest.raises(UsageError, match=r"before hvd.init\(\)"):
        hvd.DistributedGradientTape(tape).gradient(y, [x])


def test_elastic_state_of_a_tape_loop_commits_and_restores(joined):
    model, x, y = _model(), tf.random.uniform([8, 4], seed=1), tf.random.uniform([8, 1], seed=2)
    opt = keras.optimizers.SGD(0.1)
    state = hvd.elastic.TensorFlowKerasState(model, opt, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.batch in range(state.batch, 3):
            with tf.GradientTape() as tape:
                loss = _loss(model, x, y)
            grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            state.commit()
        return state.batch
    assert train(state) == 2 and int(opt.iterations) == 3
    committed = [w.copy() for w in model.get_weights()]
    model.layers[0].kernel.assign(tf.zeros_like(model.layers[0].kernel))
    state.restore()
    for a, b in zip(committed, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    variables = hvd.elastic.TensorFlowState([tf.Variable(2.0)], epoch=1)
    variables.variables[0].assign(5.0)
    variables.epoch = 4
    variables.restore()
    assert (float(variables.variables[0]), variables.epoch) == (2.0, 1)


def test_integer_tensors_are_scaled_in_floating_point(joined):
    """Horovod's suite found a 0.5 factor cast to the integer dtype first: every
    integer tensor came back scaled by 0."""
    ints = tf.constant([2, 4, 6, 8], tf.int32)
    assert hvd.reducescatter(ints, op=hvd.Sum, prescale_factor=0.5).numpy().tolist() == [1, 2, 3, 4]
    assert hvd.grouped_reducescatter([ints], op=hvd.Sum, postscale_factor=1.5)[0].numpy() \
        .tolist() == [3, 6, 9, 12]
    assert hvd.allreduce(ints, op=hvd.Sum, postscale_factor=0.5).numpy().tolist() == [1, 2, 3, 4]


def test_grouped_allreduce_takes_indexed_slices_beside_dense_tensors(joined):
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]), tf.constant([3, 2]))
    sparse, dense = hvd.grouped_allreduce([slices, tf.ones([2])])
    assert isinstance(sparse, tf.IndexedSlices) and sparse.indices.numpy().tolist() == [1]
    assert dense.numpy().tolist() == [1.0, 1.0]


def test_sparse_reductions_refuse_what_horovod_refuses_with_its_exception_type(joined):
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]), tf.constant([3, 2]))
    with pytest.raises(NotImplementedError, match="prescale_factor"):
        hvd.allreduce(slices, prescale_factor=2.0)
    with pytest.raises(NotImplementedError, match="op=hvd.Max"):
        hvd.allreduce(slices, op=hvd.Max)


def test_half_precision_is_scaled_in_float32_as_horovod_does(joined):
    half = tf.constant([100.0, -37.0], tf.float16)
    factor = 0.7301
    expected = tf.cast(tf.cast(half, tf.float32) * factor, tf.float16).numpy().tolist()
    assert hvd.reducescatter(half, op=hvd.Sum, prescale_factor=factor).numpy().tolist() == expected


def test_build_facts_are_answered_before_init_as_horovods_are():
    state.reset()
    assert hvd.ccl_built() is False and hvd.rocm_built() is False
    with pytest.raises(UsageError, match=r"before hvd.init"):
        hvd.mpi_enabled()
