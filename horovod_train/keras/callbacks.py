"""The fit callbacks behind htk strategy.callbacks().

Every callback here that communicates runs on every rank at the same points (train
begin, epoch end), and decides nothing from local values alone.
"""
import keras
import numpy as np
import tensorflow as tf

from horovod_train import schedules
from horovod_train.errors import UsageError
from horovod_train.keras import divergence_guard, state
from horovod_train.keras.jit import compile_around_collectives
from horovod_train.keras.lr_callbacks import (LearningRateScheduleCallback,
                                              LearningRateWarmupCallback)
from horovod_train.keras.optimizer import DistributedOptimizer, check_compiled_optimizer


class BroadcastInitialState(keras.callbacks.Callback):
    """Rank 0's model weights AND optimizer state on every rank, once, before training.

    A model built before fit is broadcast at train begin (the optimizer is built first
    so its slots exist). A model built lazily by its first step is broadcast right after
    that step; gradients were averaged, so that step kept the ranks consistent anyway.
    At epoch ends and at the end of training the divergence guard compares the ranks'
    trainable weights. `local_ids`: variables (by id) that keep each rank's own values."""

    def __init__(self, strategy, root_rank=0, local_ids=None):
        super().__init__()
        self.strategy = strategy
        self.root_rank = root_rank
        self.local_ids = set(local_ids or ())
        self.done = False
        self.guard = divergence_guard.EpochGuard(self.local_ids)  # the same set, shared

    def prepare(self):
        """At train begin, before any collective: refuse what would diverge or hang."""
        check_compiled_optimizer(self.model, self.strategy)
        compile_around_collectives(self.model, self.strategy)

    def on_train_begin(self, logs=None):
        self.prepare()
        self.guard.train_begin()
        if not self.done and self.model.built and self.model.weights:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.done:
            self._broadcast()

    def on_epoch_end(self, epoch, logs=None):
        self.guard.epoch_end(self.strategy, self.model, epoch, self.params.get("steps"))

    def on_train_end(self, logs=None):
        self.guard.train_end(self.strategy, self.model)

    def _broadcast(self):
        opt = self.model.optimizer
        if opt is not None and not opt.built:
            opt.build(self.model.trainable_variables)
        variables = list(self.model.weights) + (list(opt.variables) if opt is not None else [])
        shared = [v for v in variables if id(v) not in self.local_ids]
        self.strategy.backend.comm.broadcast_variables(shared, self.root_rank)
        self.done = True


class MetricAverage(keras.callbacks.Callback):
    """Epoch-end logs averaged over ranks (before History, checkpoints and the progress
    bar see them), and float non-trainable state (BatchNorm moving statistics, which
    each rank updates from its own data) averaged too, so replicas stay identical.
    Passed to evaluate(), it averages the returned metrics over ranks' shards."""

    def __init__(self, strategy, sync_state=True):
        super().__init__()
        self.strategy = strategy
        self.sync_state = sync_state
        self.in_fit = False

    def on_train_begin(self, logs=None):
        self.in_fit = True

    def on_train_end(self, logs=None):
        self.in_fit = False

    def on_test_end(self, logs=None):
        if not self.in_fit:  # inside fit, val_* metrics are averaged at epoch end
            self._average(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._average(logs)
        if self.sync_state:
            self._sync_non_trainable()

    def _average(self, logs):
        if not logs or self.strategy.size == 1:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.isreal(v))
        if keys:
            values = tf.constant([float(logs[k]) for k in keys], tf.float64)
            for key, value in zip(keys, self.strategy.allreduce_mean(values).numpy()):
                logs[key] = float(value)

    def _sync_non_trainable(self):
        state = [w for w in self.model.non_trainable_weights if "float" in str(w.dtype)]
        if not state or self.strategy.size == 1:
            return
        flat = tf.concat([tf.reshape(tf.cast(w.value, tf.float32), [-1]) for w in state], 0)
        mean = self.strategy.allreduce_mean(flat)
        sizes = [int(np.prod(w.shape)) for w in state]
        for w, part in zip(state, tf.split(mean, sizes)):
            w.assign(tf.cast(tf.reshape(part, w.shape), w.dtype))


class LearningRateWarmup(keras.callbacks.Callback):
    """Linear warmup of Keras 3's optimizer.learning_rate from lr/size to lr over
    `warmup_epochs` (lr is the rate the optimizer holds at train begin: the per-replica
    rate times the world size, linear scaling)."""

    def __init__(self, strategy, warmup_epochs, steps_per_epoch=None):
        super().__init__()
        self.strategy = strategy
        self.warmup_epochs = float(warmup_epochs)
        self.steps_per_epoch = steps_per_epoch
        self.target = None
        self.epoch = 0
        self.finished = False

    def on_train_begin(self, logs=None):
        opt = self.model.optimizer
        inner = getattr(opt, "inner_optimizer", opt)
        if not isinstance(inner._learning_rate, keras.Variable):
            raise UsageError(
                f"warmup_epochs: received an optimizer whose learning rate is a "
                f"{type(inner._learning_rate).__name__}; expected a float rate to warm up. Fix: "
                f"pass a float learning_rate, or build the warmup into your schedule")
        self.steps_per_epoch = self.steps_per_epoch or self.params.get("steps")
        if not self.steps_per_epoch:
            raise UsageError("warmup_epochs: received a dataset of unknown length; expected a "
                             "known number of steps per epoch. Fix: pass steps_per_epoch to fit")
        if self.target is None:
            self.target = float(opt.learning_rate.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.finished:
            return
        progress = (self.epoch + batch / self.steps_per_epoch) / self.warmup_epochs
        self.model.optimizer.learning_rate = schedules.warmup_rate(
            self.target / self.strategy.size, self.target, progress)
        self.finished = progress >= 1.0


class ChiefProgbar(keras.callbacks.ProgbarLogger):
    """Keras's progress bar on the chief only. Being in the callback list, it replaces
    the default one, and runs after MetricAverage: epoch lines show averaged metrics."""

    def __init__(self, is_chief):
        super().__init__()
        self.is_chief = is_chief

    def set_params(self, params):
        super().set_params(params)
        if not self.is_chief:
            self.verbose = 0


# ---- Horovod's names (hvd.callbacks.*): the job is the process's joined strategy -------
class BroadcastGlobalVariablesCallback(BroadcastInitialState):
    """Horovod's: root_rank's model weights and optimizer state on every rank, once,
    before the first update (at train begin when the model is built, else after the
    first batch, as Horovod's); `local_variables` keep each rank's own values. Unlike
    ours, a model compiled without DistributedOptimizer is not refused (Horovod's
    tests broadcast frozen models): the divergence guard stops it if the ranks part."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__(None, root_rank, [id(v) for v in local_variables or []])

    @property
    def strategy(self):
        return state.require("BroadcastGlobalVariablesCallback")

    @strategy.setter
    def strategy(self, value):
        """Set by BroadcastInitialState.__init__ (None): the joined strategy is read."""

    def register_local_var(self, var):
        self.local_ids.add(id(var))

    def prepare(self):
        if isinstance(self.model.optimizer, DistributedOptimizer):
            compile_around_collectives(self.model, self.strategy)


class MetricAverageCallback(MetricAverage):
    """Horovod's: the epoch-end metrics averaged over ranks (before the callbacks after
    it see them). Only the metrics, as Horovod's: model state is left alone."""

    def __init__(self, device=""):
        super().__init__(strategy=None, sync_state=False)

    @property
    def strategy(self):
        return state.require("MetricAverageCallback")

    @strategy.setter
    def strategy(self, value):
        """Set by MetricAverage.__init__ (None): the joined strategy is read instead."""


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's: keras ModelCheckpoint(save_best_only=True), written by the chief only.
    Horovod's estimators set `filepath` afterwards; a script passes filepath= here."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        placeholder = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath or placeholder, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        self.filepath = filepath

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise UsageError("BestModelCheckpoint: received no filepath; expected where to "
                             "write the best model. Fix: BestModelCheckpoint(filepath="
                             "'best.keras', monitor='val_loss'), or set callback.filepath")
        super().on_train_begin(logs)

    def _chief(self) -> bool:
        return state.require("BestModelCheckpoint").is_chief

    def on_train_batch_end(self, batch, logs=None):
        if self._chief():
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self._chief():
            super().on_epoch_end(epoch, logs)


__all__ = ["BroadcastInitialState", "MetricAverage", "LearningRateWarmup", "ChiefProgbar",
           "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateWarmupCallback", "LearningRateScheduleCallback", "BestModelCheckpoint"]
