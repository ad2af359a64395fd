"""The drop-in API for people who keep their own Keras 3 `model.fit` script.

After `import horovod_train.keras as htk`:

    strategy = htk.Strategy(backend="auto")            # first, before any TF op
    x, y = strategy.shard((x, y))                      # this rank's share
    with strategy.scope():
        model = build_model()
        opt = strategy.distributed_optimizer(keras.optimizers.Adam(lr * strategy.size))
        model.compile(optimizer=opt, ...)
    model.fit(x, y, callbacks=strategy.callbacks(checkpoint="ckpt.keras"))

Every backend runs Keras undistributed inside each process: `model.fit`, `evaluate` and
`predict` see a plain model and this rank's plain data, and the optimizer wrapper does
the one cross-rank step, the backend's graph_mean of the gradients, before it applies
them. strategy.scope() is the backend's keras_scope(): for mwms NOT the MWMS scope,
since Keras 3 `fit` under MultiWorkerMirroredStrategy fails on TF 2.21 ("unsupported
type PerReplica"); there the strategy only configures TF's collective runtime.

Modules: strategy (htk.Strategy), state (the process's active strategy: active(),
reset()), optimizer (DistributedOptimizer), callbacks, sharding, jit (XLA around the
collectives with compile(jit_compile=True)), guards (refusals of tf.distribute scopes).
"""
from horovod_train.keras import callbacks, guards, jit, optimizer, sharding, state
from horovod_train.keras.callbacks import (BroadcastInitialState, ChiefProgbar,
                                           LearningRateWarmup, MetricAverage)
from horovod_train.keras.guards import native_scope_error, reject_native_strategy
from horovod_train.keras.jit import SplitTrainStep, XlaParts, compile_around_collectives
from horovod_train.keras.optimizer import DistributedOptimizer
from horovod_train.keras.sharding import shard_arrays, shard_dataset
from horovod_train.keras.strategy import Strategy

__all__ = [
    "Strategy", "DistributedOptimizer", "state",
    "BroadcastInitialState", "MetricAverage", "LearningRateWarmup", "ChiefProgbar",
    "SplitTrainStep", "XlaParts", "compile_around_collectives",
    "shard_arrays", "shard_dataset", "native_scope_error", "reject_native_strategy",
    "callbacks", "guards", "jit", "optimizer", "sharding",
]
