"""Callbacks and input helpers behind horovod_train.keras (the drop-in Keras API).

Every callback here that communicates runs on every rank at the same points (train
begin, epoch end), and decides nothing from local values alone.
"""
import keras
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train.errors import UsageError


def unwrap_optimizer(optimizer, accum_steps, loss_scale, initial_scale, growth_steps):
    """Checks what strategy.distributed_optimizer received; returns (the optimizer to
    wrap, loss scaling on?, initial scale, growth steps)."""
    from horovod_train.keras import DistributedOptimizer, reject_native_strategy
    from horovod_train.keras import native_scope_error
    if isinstance(optimizer, str):
        optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, DistributedOptimizer):
        raise UsageError("strategy.distributed_optimizer: received an optimizer that is already an "
                         "htk DistributedOptimizer; expected a plain Keras optimizer. Wrapping "
                         "twice would average every gradient twice per step. Fix: wrap it once")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise UsageError(f"strategy.distributed_optimizer: received {type(optimizer).__name__}; "
                         f"expected a Keras 3 optimizer (keras.optimizers.*). Fix: pass e.g. "
                         f"keras.optimizers.Adam(1e-3) (tf.keras/Horovod optimizers do not apply)")
    reject_native_strategy("strategy.distributed_optimizer()")
    if getattr(optimizer, "_distribution_strategy", tf.distribute.get_strategy()) \
            is not tf.distribute.get_strategy():
        raise native_scope_error("the optimizer passed to strategy.distributed_optimizer()")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        initial_scale, growth_steps = optimizer.initial_scale, optimizer.dynamic_growth_steps
        optimizer, loss_scale = optimizer.inner_optimizer, True
    if getattr(optimizer, "gradient_accumulation_steps", None):
        k = optimizer.gradient_accumulation_steps
        raise UsageError(f"strategy.distributed_optimizer: received an optimizer with "
                         f"gradient_accumulation_steps={k}; expected none (Keras would accumulate "
                         f"after every allreduce, one per micro-batch). Fix: drop it and pass "
                         f"accum_steps={k} here")
    if not isinstance(accum_steps, int) or accum_steps < 1:
        raise UsageError(f"accum_steps: received {accum_steps!r}; expected an int >= 1. "
                         f"Fix: pass accum_steps=k with k micro-batches per update")
    if loss_scale == "auto":
        loss_scale = keras.mixed_precision.global_policy().name == "mixed_float16"
    return optimizer, loss_scale in (True, "dynamic"), initial_scale, growth_steps


def check_compiled_optimizer(model, strategy):
    """Fails at train begin, before any collective, when fit would diverge or hang."""
    from horovod_train.keras import DistributedOptimizer
    opt = model.optimizer
    if isinstance(opt, DistributedOptimizer):
        if opt.strategy.backend is not strategy.backend:
            raise UsageError("model.fit: the compiled optimizer belongs to another htk.Strategy; "
                             "expected this one. Fix: wrap with this strategy's "
                             "distributed_optimizer")
        if model.dtype_policy.name == "mixed_float16" and not opt.loss_scaling:
            logging.warning("htk | mixed_float16 without loss scaling: small gradients may "
                            "underflow. Fix: strategy.distributed_optimizer(opt, loss_scale=True)")
        return
    if strategy.size > 1:
        raise UsageError(
            f"model.fit: received a model compiled with {type(opt).__name__}; expected "
            f"strategy.distributed_optimizer(...). Without it each rank applies its own gradients "
            f"and the replicas diverge. Fix: model.compile(optimizer="
            f"strategy.distributed_optimizer(keras.optimizers.Adam(...)), ...)")


class BroadcastInitialState(keras.callbacks.Callback):
    """Rank 0's model weights AND optimizer state on every rank, once, before training.

    A model built before fit is broadcast at train begin (the optimizer is built first
    so its slots exist). A model built lazily by its first step is broadcast right after
    that step; gradients were averaged, so that step kept the ranks consistent anyway."""

    def __init__(self, strategy):
        super().__init__()
        self.strategy = strategy
        self.done = False

    def on_train_begin(self, logs=None):
        from horovod_train.keras_jit import compile_around_collectives
        check_compiled_optimizer(self.model, self.strategy)
        compile_around_collectives(self.model, self.strategy)
        if not self.done and self.model.built and self.model.weights:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.done:
            self._broadcast()

    def _broadcast(self):
        opt = self.model.optimizer
        if opt is not None and not opt.built:
            opt.build(self.model.trainable_variables)
        variables = list(self.model.weights) + (list(opt.variables) if opt is not None else [])
        self.strategy.backend.broadcast_variables(variables)
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
        size = self.strategy.size
        frac = min(progress, 1.0)
        self.model.optimizer.learning_rate = self.target / size * (1.0 + (size - 1) * frac)
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


# ---- sharding ----------------------------------------------------------------------
def _already_sharded(dataset, registry) -> bool:
    stack = [dataset]
    while stack:
        ds = stack.pop()
        if ds in registry or type(ds).__name__ == "_ShardDataset":
            return True
        try:
            stack.extend(ds._inputs())
        except (AttributeError, TypeError):
            pass
    return False


def _twice_error(what):
    return UsageError(f"strategy.shard: received {what} that is already sharded (by shard(), "
                      f"distribute_dataset() or its own .shard()); expected unsharded data. Each "
                      f"rank would see 1/size^2 of the data. Fix: shard once")


def shard_dataset(dataset, rank, size, registry):
    """Element-wise shard. With a known size every rank keeps N // size elements, so
    every rank runs the same number of steps (a rank with one more would wait forever
    in its extra allreduce)."""
    if _already_sharded(dataset, registry):
        raise _twice_error("a tf.data.Dataset")
    total = int(dataset.cardinality())
    out = dataset.shard(size, rank)
    if total >= 0:
        if total < size:
            raise UsageError(f"strategy.shard: received a dataset of {total} elements; expected at "
                             f"least one per rank ({size}). Fix: shard before batching")
        out = out.take(total // size)
    elif total == tf.data.UNKNOWN_CARDINALITY:
        logging.warning("htk | strategy.shard: dataset size unknown; ranks may get different "
                        "step counts and hang. Fix: pass steps_per_epoch to fit, or "
                        "dataset.apply(tf.data.experimental.assert_cardinality(n))")
    registry.add(out)
    return out


def shard_arrays(data, rank, size, registry):
    """Rank r keeps rows r, r+size, ... of N // size * size rows: equal lengths."""
    if isinstance(data, dict):
        keys, leaves = list(data), list(data.values())
    elif isinstance(data, (tuple, list)):
        keys, leaves = None, list(data)
    else:
        keys, leaves = None, [data]
    arrays = [leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf) for leaf in leaves]
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise UsageError(f"strategy.shard: received arrays of lengths {sorted(lengths)}; expected "
                         f"one length (examples along axis 0). Fix: pass (x, y) of equal length")
    if any(registry.get(id(a)) is a for a in arrays):
        raise _twice_error("arrays")
    per_rank = lengths.pop() // size
    if per_rank == 0:
        raise UsageError(f"strategy.shard: received fewer examples than ranks ({size}); "
                         f"expected at least one per rank. Fix: use fewer ranks or more data")
    out = [a[rank:per_rank * size:size] for a in arrays]
    for a in out:
        registry[id(a)] = a
    if keys is not None:
        return dict(zip(keys, out))
    if isinstance(data, (tuple, list)):
        return type(data)(out)
    return out[0]
