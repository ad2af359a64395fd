"""Horovod's process and tensor API by Horovod's names: hvd.init(), hvd.size(), ...

`import horovod_train.keras as hvd` then works as `import horovod.tensorflow.keras as
hvd` does, on Keras 3. hvd.init() joins the job as htk.Strategy() does (the backend
from how the process was launched: horovodrun/mpirun/srun -> horovod, TF_CONFIG ->
mwms, alone -> local); everything else asks the joined strategy's backend, whose
communicator (backend.comm, backends/comm.py) does the collectives. What a backend cannot do raises,
naming it.
"""

import tensorflow as tf

from horovod_train.backends import horovod_comm
from horovod_train.backends.comm import ReduceOp, scaled
from horovod_train.errors import NotSupported, UsageError
from horovod_train.keras import compression as comp
from horovod_train.keras import state

Average, Sum, Min, Max, Product, Adasum = (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.MIN,
                                          ReduceOp.MAX, ReduceOp.PRODUCT, ReduceOp.ADASUM)


class ProcessSet:
    """Horovod's process sets: only the global one (every rank) exists here."""

    def __init__(self, ranks=None):
        if ranks is not None:
            raise UsageError(f"hvd.ProcessSet: received ranks {ranks!r}; expected the global "
                             f"process set only (sub-groups are not supported). Fix: drop "
                             f"process_set=..., every collective then spans all ranks")

    def __repr__(self):
        return "hvd.global_process_set"


global_process_set = ProcessSet()


def add_process_set(process_set):
    """Always refused: ProcessSet(ranks) raises, naming the fix."""
    ProcessSet(getattr(process_set, "ranks", process_set))


def remove_process_set(process_set):
    return False  # Horovod's answer for a set it does not hold


def _check_process_set(process_set):
    if process_set is not None and process_set is not global_process_set:
        ProcessSet(getattr(process_set, "ranks", process_set))


# ---- the job ------------------------------------------------------------------
def init(comm=None, process_sets=None):
    """Joins the job (once; again after shutdown()). `comm`/`process_sets` are MPI
    sub-communicators and process sets, which this package does not offer."""
    if comm is not None or process_sets:
        raise UsageError(f"hvd.init: received comm={comm!r}, process_sets={process_sets!r}; "
                         f"expected neither (the job spans every launched rank). Fix: "
                         f"call hvd.init() without arguments")
    if state.active() is None:
        from horovod_train.keras.strategy import Strategy
        Strategy()


def shutdown():
    """Leaves the job where the backend can (Horovod); is_initialized() is then False."""
    strategy = state.active()
    if strategy is not None:
        strategy.backend.comm.shutdown()
        state.reset()


def is_initialized() -> bool:
    return state.active() is not None


def joined(what):
    """The job this process joined (its htk.Strategy), or the error a Horovod user
    understands: hvd.init() was not called."""
    strategy = state.active()
    if strategy is None:
        raise UsageError(f"hvd.{what}(): received a call before hvd.init(); expected the job "
                         f"to be joined first. Fix: call hvd.init() at the top of the script")
    return strategy


def _backend(what):
    return joined(what).backend


def _ops(what):
    return _backend(what).comm


def size() -> int:
    return _backend("size").info.size


def rank() -> int:
    return _backend("rank").info.rank


def local_size() -> int:
    return _backend("local_size").info.local_size


def local_rank() -> int:
    return _backend("local_rank").info.local_rank


def cross_rank() -> int:
    return _ops("cross_rank").cross()[0]


def cross_size() -> int:
    return _ops("cross_size").cross()[1]


def is_homogeneous() -> bool:
    """Whether every host runs as many ranks as this one."""
    return local_size() * cross_size() == size()


def size_op(process_set_id=0, name=None):
    """hvd.size() as an int32 tensor (of the global process set, the only one)."""
    _check_process_set(None if process_set_id == 0 else ProcessSet(process_set_id))
    return tf.constant(size(), tf.int32)


def local_size_op(name=None):
    return tf.constant(local_size(), tf.int32)


def rank_op(name=None):
    return tf.constant(rank(), tf.int32)


def local_rank_op(name=None):
    return tf.constant(local_rank(), tf.int32)


def _fact(name):
    def query() -> bool:
        if state.active() is None and name.endswith("_built"):
            return horovod_comm.installed_fact(name)
        return _ops(name).facts()[name]
    query.__name__ = name
    query.__doc__ = (f"Horovod's hvd.{name}(); False where the backend is not Horovod. "
                     f"A *_built fact is answered before hvd.init() too, as Horovod's is.")
    return query




mpi_enabled, mpi_built, mpi_threads_supported = (_fact("mpi_enabled"), _fact("mpi_built"),
                                                 _fact("mpi_threads_supported"))
gloo_enabled, gloo_built, nccl_built = _fact("gloo_enabled"), _fact("gloo_built"), _fact("nccl_built")
ddl_built, ccl_built = _fact("ddl_built"), _fact("ccl_built")
cuda_built, rocm_built = _fact("cuda_built"), _fact("rocm_built")


def start_timeline(file_path, mark_cycles=False):
    _ops("start_timeline").start_timeline(file_path, mark_cycles)


def stop_timeline():
    _ops("stop_timeline").stop_timeline()


# ---- tensor collectives ----------------------------------------------------------
def resolve_op(average, op) -> ReduceOp:
    """Horovod's rule: `op` supersedes the deprecated `average`; neither -> Average."""
    if average is not None and op is not None:
        raise UsageError(f"allreduce: received average={average!r} and op={op!r}; expected "
                         f"one of them. Fix: pass op=hvd.Average or op=hvd.Sum only")
    if op is None:
        return ReduceOp.SUM if average is False else ReduceOp.AVERAGE
    if not isinstance(op, ReduceOp):
        raise UsageError(f"op: received {op!r}; expected one of hvd.Average, hvd.Sum, hvd.Min, "
                         f"hvd.Max, hvd.Product, hvd.Adasum. Fix: pass op=hvd.Average")
    return op


def _compressed_allreduce(ops, tensors, op, compression, prescale, postscale):
    """Dense tensors reduced in one grouped call; tf.IndexedSlices gathered
    (sparse_allreduce), each in its place."""
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse:
        if prescale != 1.0 or postscale != 1.0:
            raise NotSupported(f"allreduce of tf.IndexedSlices: received prescale_factor="
                               f"{prescale}, postscale_factor={postscale}; expected 1.0 (the "
                               f"rows are gathered, not summed). Fix: scale the values "
                               f"yourself, or pass sparse_as_dense=True")
        out = list(tensors)
        dense = [i for i in range(len(tensors)) if i not in sparse]
        for i in sparse:
            out[i] = sparse_allreduce(tensors[i], op)
        reduced = _compressed_allreduce(ops, [tensors[i] for i in dense], op, compression,
                                        prescale, postscale) if dense else []
        for i, r in zip(dense, reduced):
            out[i] = r
        return out
    wire = comp.wire_name(compression)
    if wire:  # Compression.fp16/bf16: the communicator casts for the trip
        return ops.grouped_allreduce(tensors, op, prescale, postscale, compression=wire)
    return comp.around(compression, tensors,
                       lambda sent: ops.grouped_allreduce(sent, op, prescale, postscale))


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=comp.Compression.none, device_dense="", device_sparse="",
              process_set=global_process_set):
    """The reduction of `value` over all ranks (Average unless op says otherwise)."""
    _check_process_set(process_set)
    ops = _ops("allreduce")
    return _compressed_allreduce(ops, [_tensor(value)], resolve_op(average, op), compression,
                                 prescale_factor, postscale_factor)[0]


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=comp.Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """One reduction for a list of tensors (fused by Horovod into few ring passes)."""
    _check_process_set(process_set)
    ops = _ops("grouped_allreduce")
    tensors = [_tensor(t) for t in tensors]
    return _compressed_allreduce(ops, tensors, resolve_op(average, op), compression,
                                 prescale_factor, postscale_factor)


def _tensor(value):
    """A tensor, or the tf.IndexedSlices it is (an embedding's gradient)."""
    return value if isinstance(value, tf.IndexedSlices) else tf.convert_to_tensor(value)


def sparse_allreduce(slices: tf.IndexedSlices, op: ReduceOp) -> tf.IndexedSlices:
    """Horovod's reduction of sparse values (an embedding's gradient): every rank's
    rows and their indices gathered, the values divided by the rank count for Average.
    Its dense form is the dense reduction's; rows hit by several ranks stay repeated."""
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise NotSupported(f"allreduce of tf.IndexedSlices: received op={op!r}; expected "
                         f"hvd.Average or hvd.Sum (the rows are gathered, not combined). Fix: "
                         f"pass op=hvd.Average, or sparse_as_dense=True")
    ops = _ops("allreduce")
    values, indices = ops.allgather(slices.values), ops.allgather(slices.indices)
    if op is ReduceOp.AVERAGE:
        values = values / tf.cast(ops.info.size, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allgather(value, name=None, process_set=global_process_set):
    """Every rank's `value` concatenated along the first dimension (which may differ)."""
    _check_process_set(process_set)
    return _ops("allgather").allgather(tf.convert_to_tensor(value))


def grouped_allgather(values, name=None, process_set=global_process_set) -> list:
    """allgather of each tensor in `values`, in order."""
    _check_process_set(process_set)
    ops = _ops("grouped_allgather")
    return [ops.allgather(tf.convert_to_tensor(v)) for v in values]


def alltoall(value, splits=None, name=None, process_set=global_process_set):
    """Rows of `value` scattered to the ranks by `splits` (evenly when None): the rows
    every rank sent here, in rank order, and (when splits is given) their counts."""
    _check_process_set(process_set)
    received, counts = _ops("alltoall").alltoall(tf.convert_to_tensor(value), splits, name)
    return received if splits is None else (received, counts)


def join():
    """This rank has run out of data (Horovod's join); returns the last rank to join."""
    return _ops("join").join()


def barrier(process_set=global_process_set):
    """Returns once every rank has called it."""
    _check_process_set(process_set)
    _ops("barrier").barrier()


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    _check_process_set(process_set)
    return _ops("broadcast").broadcast(tf.convert_to_tensor(value), root_rank)


def reducescatter(value, name=None, op=Average, compression=comp.Compression.none,
                  process_set=global_process_set):
    """The reduction over ranks, of which this rank keeps its share of the first dim."""
    return grouped_reducescatter([value], op=op, compression=compression,
                                 process_set=process_set)[0]


def grouped_reducescatter(values, op=Average, compression=comp.Compression.none,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0) -> list:
    """reducescatter of each tensor in `values`, in order (each scaled by
    prescale_factor before the reduction and postscale_factor after it)."""
    _check_process_set(process_set)
    ops, op = _ops("reducescatter"), resolve_op(None, op)
    return [scaled(ops.reducescatter(scaled(tf.convert_to_tensor(v), prescale_factor), op),
                   postscale_factor) for v in values]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Root's values into `variables` (Keras 3 or tf.Variables) on every rank."""
    _check_process_set(process_set)
    _ops("broadcast_variables").broadcast_variables(list(variables), root_rank)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set) -> list:
    """broadcast_variables, returning the variables' new values (Horovod's in-place form)."""
    variables = list(variables)
    broadcast_variables(variables, root_rank, process_set)
    return [tf.convert_to_tensor(v) for v in variables]


def broadcast_global_variables(root_rank):
    raise UsageError(
        f"hvd.broadcast_global_variables({root_rank!r}): received a call under TensorFlow 2, "
        f"which has no global-variables collection; expected the variables to be named. Fix: "
        f"hvd.broadcast_variables(model.variables, root_rank={root_rank!r}), or "
        f"hvd.callbacks.BroadcastGlobalVariablesCallback({root_rank!r}) in model.fit")


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """A picklable object from root_rank, on every rank."""
    _check_process_set(process_set)
    return _ops("broadcast_object").broadcast_object(obj, root_rank)


def allgather_object(obj, name=None, process_set=global_process_set) -> list:
    """Every rank's picklable object, as a list in rank order."""
    _check_process_set(process_set)
    return _ops("allgather_object").allgather_object(obj)
