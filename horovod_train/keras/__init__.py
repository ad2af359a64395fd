"""The drop-in for people who keep their own Keras 3 `model.fit` script, two ways.

Horovod's Keras API, by Horovod's names (`import horovod_train.keras as hvd`, the one
line a Horovod script changes):

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

Or the Strategy API (`import horovod_train.keras as htk`):

    strategy = htk.Strategy(backend="auto")            # first, before any TF op
    x, y = strategy.shard((x, y))                      # this rank's share
    with strategy.scope():
        model = build_model()
        opt = strategy.distributed_optimizer(keras.optimizers.Adam(lr * strategy.size))
        model.compile(optimizer=opt, ...)
    model.fit(x, y, callbacks=strategy.callbacks(checkpoint="ckpt.keras"))

Both are one job per process (htk.state): hvd.init() joins it as htk.Strategy() does.
Every backend runs Keras undistributed inside each process: `model.fit`, `evaluate` and
`predict` see a plain model and this rank's plain data, and the optimizer wrapper does
the one cross-rank step, the backend's allreduce_gradients, before it applies them.
Under mwms that is no MWMS scope either (Keras 3 `fit` under MultiWorkerMirroredStrategy
fails on TF 2.21, "unsupported type PerReplica"): the strategy only configures TF's
collective runtime, which the backend's communicator uses.

Ranks never silently diverge: the DistributedOptimizer broadcasts rank 0's state at its
first update even without the broadcast callback, and a checksum of the weights is
compared across ranks at epoch ends (the broadcast callbacks) and every
`divergence_check_steps` updates (the optimizer).

Modules: horovod_api (hvd.init, size, rank, allreduce, ...), compression, optimizer
(DistributedOptimizer) with hvd_options, callbacks (ours and Horovod's names) with
lr_callbacks, elastic (hvd.elastic), saving (load_model), divergence_guard, strategy
(htk.Strategy), state (the process's active job), sharding, jit (XLA around the
collectives), guards (refusals of tf.distribute scopes).
"""
from horovod_train.keras import (callbacks, compression, elastic, guards, horovod_api, jit,
                                 optimizer, sharding, state)
from horovod_train.keras.callbacks import (BroadcastInitialState, ChiefProgbar,
                                           LearningRateWarmup, MetricAverage)
from horovod_train.keras.compression import Compression
from horovod_train.keras.guards import native_scope_error, reject_native_strategy
from horovod_train.keras.horovod_api import (
    Adasum, Average, Max, Min, ProcessSet, Product, Sum, add_process_set, allgather,
    allgather_object, allreduce, broadcast, broadcast_global_variables, broadcast_object,
    broadcast_variables, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    global_process_set, gloo_built, gloo_enabled, grouped_allreduce, init, is_initialized,
    local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
    reducescatter, remove_process_set, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from horovod_train.keras.jit import SplitTrainStep, compile_around_collectives
from horovod_train.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from horovod_train.keras.saving import load_model
from horovod_train.keras.sharding import shard_arrays, shard_dataset
from horovod_train.keras.strategy import Strategy

HOROVOD_NAMES = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_enabled", "mpi_built", "mpi_threads_supported",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "start_timeline", "stop_timeline", "Average", "Sum", "Min", "Max",
    "Product", "Adasum", "Compression", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "allreduce", "grouped_allreduce", "allgather",
    "broadcast", "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "allgather_object", "reducescatter", "DistributedOptimizer", "PartialDistributedOptimizer",
    "load_model", "callbacks",
    "elastic",
]

__all__ = HOROVOD_NAMES + [
    "Strategy", "state", "BroadcastInitialState", "MetricAverage", "LearningRateWarmup",
    "ChiefProgbar", "SplitTrainStep", "compile_around_collectives",
    "shard_arrays", "shard_dataset", "native_scope_error", "reject_native_strategy",
    "compression", "guards", "horovod_api", "jit", "optimizer", "sharding",
]
