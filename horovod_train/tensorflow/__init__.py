"""Horovod's TensorFlow 2 API on Keras 3: `import horovod_train.tensorflow as hvd`.

A Horovod GradientTape script changes its import line and keeps everything else:

    hvd.init()
    opt = keras.optimizers.Adam(0.001 * hvd.size())

    @tf.function
    def step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)  # a property in Keras 3
        return loss

The job and every collective are the Keras API's (horovod_train.keras.horovod_api,
through the backend's communicator): hvd.init() joins as htk.Strategy() does, so the
script runs on Horovod under horovodrun/mpirun/srun and on TensorFlow's collectives
(MWMS) under TF_CONFIG. This module only gives them horovod.tensorflow's signatures
(whose positional order differs from the Keras API's) and adds the tape (tape.py).
What a backend cannot do raises, naming the fix.
"""
from horovod_train.keras import horovod_api as _api
from horovod_train.keras.compression import Compression
from horovod_train.keras.horovod_api import (
    Adasum, Average, Max, Min, ProcessSet, Product, Sum, add_process_set,
    barrier, broadcast_, broadcast_variables, ccl_built, cross_rank,
    cross_size, cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, join, local_rank, local_rank_op, local_size,
    local_size_op, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rank_op,
    remove_process_set, rocm_built, shutdown, size, size_op, start_timeline, stop_timeline)
from horovod_train.keras.optimizer import DistributedOptimizer
from horovod_train.tensorflow import elastic
from horovod_train.tensorflow.tape import DistributedGradientTape, PartialDistributedGradientTape


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """The reduction of `tensor` over all ranks (Average unless op says otherwise); a
    tf.IndexedSlices is gathered (values / size for Average), as Horovod's."""
    return _api.allreduce(tensor, name, average, prescale_factor, postscale_factor, op,
                          compression, process_set=process_set)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    return _api.grouped_allreduce(tensors, average, compression=compression, op=op,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    return _api.allgather(tensor, name, process_set)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    return _api.grouped_allgather(tensors, name, process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    return _api.broadcast(tensor, root_rank, name, process_set)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    return _api.alltoall(tensor, splits, name, process_set)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    return _api.grouped_reducescatter([tensor], op, compression, process_set,
                                      prescale_factor, postscale_factor)[0]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    return _api.grouped_reducescatter(tensors, op, compression, process_set, prescale_factor,
                                      postscale_factor)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """A picklable object from root_rank on every rank (`session`, TF 1's, is unused)."""
    return _api.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set) -> list:
    return _api.allgather_object(obj, name, process_set)


def broadcast_global_variables(root_rank):
    return _api.broadcast_global_variables(root_rank)


HOROVOD_NAMES = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "size_op", "local_size_op", "rank_op",
    "local_rank_op", "mpi_enabled", "mpi_built", "mpi_threads_supported", "gloo_enabled",
    "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "start_timeline", "stop_timeline", "Average", "Sum", "Min", "Max", "Product", "Adasum",
    "Compression", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "allreduce", "grouped_allreduce", "allgather", "grouped_allgather",
    "broadcast", "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter",
    "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "allgather_object", "join", "barrier", "DistributedGradientTape",
    "PartialDistributedGradientTape", "DistributedOptimizer", "elastic",
]
__all__ = HOROVOD_NAMES
