"""The optimizer wrapper: allreduce the gradients, then unscale, check and apply.

A keras.optimizers.LossScaleOptimizer subclass, so that compile() under mixed_float16
does not wrap it in Keras's own, which would decide finiteness on each rank's local
gradients (ranks could disagree and hang). Loss scaling wraps the reduction, as in
horovod_train.step: scaled gradients are reduced, then unscaled and checked, so every
rank sees the same numbers and skips or applies the same steps.
"""
import keras
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import precision
from horovod_train.errors import UsageError
from horovod_train.keras import state
from horovod_train.keras.guards import native_scope_error, reject_native_strategy


def unwrap_optimizer(optimizer, accum_steps, loss_scale, initial_scale, growth_steps):
    """Checks what strategy.distributed_optimizer received; returns (the optimizer to
    wrap, loss scaling on?, initial scale, growth steps)."""
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
        loss_scale = precision.uses_loss_scaling(keras.mixed_precision.global_policy().name)
    return optimizer, loss_scale in (True, "dynamic"), initial_scale, growth_steps


def check_compiled_optimizer(model, strategy):
    """Fails at train begin, before any collective, when fit would diverge or hang."""
    opt = model.optimizer
    if isinstance(opt, DistributedOptimizer):
        if opt.strategy.backend is not strategy.backend:
            raise UsageError("model.fit: the compiled optimizer belongs to another htk.Strategy; "
                             "expected this one. Fix: wrap with this strategy's "
                             "distributed_optimizer")
        if precision.uses_loss_scaling(model.dtype_policy.name) and not opt.loss_scaling:
            logging.warning("htk | mixed_float16 without loss scaling: small gradients may "
                            "underflow. Fix: strategy.distributed_optimizer(opt, loss_scale=True)")
        return
    if strategy.size > 1:
        raise UsageError(
            f"model.fit: received a model compiled with {type(opt).__name__}; expected "
            f"strategy.distributed_optimizer(...). Without it each rank applies its own gradients "
            f"and the replicas diverge. Fix: model.compile(optimizer="
            f"strategy.distributed_optimizer(keras.optimizers.Adam(...)), ...)")


@keras.saving.register_keras_serializable(package="horovod_train")
class DistributedOptimizer(keras.optimizers.LossScaleOptimizer):
    """Allreduce, then (unscale, check finite, apply or skip on every rank).

    A LossScaleOptimizer subclass, so that compile() under mixed_float16 does not wrap
    it in Keras's own, which would decide finiteness on each rank's local gradients
    (ranks could disagree and hang). Without loss scaling the scale stays 1."""

    _ready = False  # set after __init__; guards against being wrapped (see below)

    # name second, as in Horovod's DistributedOptimizer(optimizer, name=None, ...).
    def __init__(self, inner_optimizer, name=None, accum_steps=1, loss_scaling=False,
                 initial_scale=2.0 ** 15, dynamic_growth_steps=2000, **kwargs):
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps,
                         name=name or "distributed_optimizer", **kwargs)
        self.accum_steps = int(accum_steps)
        self.loss_scaling = bool(loss_scaling)
        self._strategy = None  # bound by Strategy.distributed_optimizer, else the active one
        self._inject = None
        self.xla = None  # jit.XlaParts, once fit compiles around the collectives
        self._ready = True

    def __setattr__(self, name, value):
        # keras.optimizers.LossScaleOptimizer(inner) sets inner.loss_scale_factor = None:
        # after our own construction, that assignment means we are being wrapped.
        if name == "loss_scale_factor" and self._ready:
            raise UsageError(
                "keras.optimizers.LossScaleOptimizer: received an htk DistributedOptimizer to "
                "wrap; expected the reverse. Keras's wrapper decides finiteness on each rank's "
                "local gradients, before the allreduce, so ranks could disagree and hang. Fix: "
                "strategy.distributed_optimizer(opt) does loss scaling itself under "
                "mixed_float16 (or pass it a LossScaleOptimizer to unwrap)")
        super().__setattr__(name, value)

    def _build_scale(self):
        if getattr(self, "dynamic_scale", None) is None:
            initial = self.initial_scale if self.loss_scaling else 1.0
            self.step_counter = self.add_variable((), "zeros", dtype="int", name="step_counter")
            self.dynamic_scale = self.add_variable(
                (), keras.initializers.Constant(initial), dtype="float32", name="dynamic_scale")
            self.skipped = self.add_variable((), "zeros", dtype="int", name="skipped_steps")
            # The optimizer's own Keras variables: saved, restored and broadcast with it.
            self._loss_scale = precision.DynamicLossScale(
                self.loss_scaling, growth_interval=self.dynamic_growth_steps,
                variables=(self.dynamic_scale, self.step_counter))

    def build(self, var_list):
        self._build_scale()
        if self.accum_steps > 1:
            self._accumulators = [self.add_variable_from_reference(v, name="accumulated_grad")
                                  for v in var_list]
        self.inner_optimizer.build(var_list)
        keras.optimizers.Optimizer.build(self, var_list)

    def scale_loss(self, loss):
        if not self.loss_scaling:
            return loss
        self._build_scale()
        return self._loss_scale.scale_loss(loss)

    @property
    def skipped_steps(self) -> int:
        return int(self.skipped.numpy()) if getattr(self, "skipped", None) is not None else 0

    @property
    def strategy(self):
        return self._strategy or state.require("DistributedOptimizer")

    def apply(self, grads, trainable_variables=None):
        reject_native_strategy("DistributedOptimizer.apply")
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        variables = list(trainable_variables)
        if not self.built:
            self.build(variables)
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        if self.xla is not None and self.xla.calls is not None:  # traced in XLA: apply later
            self.xla.calls.append((grads, variables))
            return
        grads = self._poisoned(grads)
        if self.accum_steps == 1:
            self._reduce_and_apply(grads, variables)
        else:
            self._accumulate(grads, variables)
        self._iterations.assign_add(1)

    def _poisoned(self, grads):
        """The test hook: one rank's gradients become inf on one apply call. Every rank
        builds the same ops (Horovod matches collectives by the names of their inputs);
        only the predicate differs."""
        if not self._inject:
            return grads
        hit = tf.logical_and(tf.equal(self._iterations + 1, self._inject[0]),
                             self._inject[1] == self.strategy.rank)
        return [None if g is None else g + tf.where(hit, tf.cast(np.inf, g.dtype),
                                                    tf.cast(0, g.dtype)) for g in grads]

    def _accumulate(self, grads, variables):
        for acc, g in zip(self._accumulators, grads):
            if g is not None:
                acc.assign_add(tf.cast(g, acc.dtype))

        def flush():
            mean = [acc.value / self.accum_steps for acc in self._accumulators]
            self._reduce_and_apply(mean, variables)
            for acc in self._accumulators:
                acc.assign(tf.zeros_like(acc.value))
            return tf.no_op()
        tf.cond(tf.equal((self._iterations + 1) % self.accum_steps, 0), flush, tf.no_op)

    def _reduce_and_apply(self, grads, variables):
        present = [i for i, g in enumerate(grads) if g is not None]
        # The mean over ranks, in this plain tf.function (the backend's own collective).
        reduced = self.strategy.backend.graph_mean([grads[i] for i in present])
        grads = list(grads)
        for i, g in zip(present, reduced):
            grads[i] = g
        if self.xla is not None:  # after the collective, in an XLA function of its own
            self.xla.update(grads, variables)
        else:
            self.unscale_check_apply(grads, variables)

    def unscale_check_apply(self, grads, variables):
        present = [i for i, g in enumerate(grads) if g is not None]
        grads = list(grads)
        for i, g in zip(present, self._loss_scale.unscale([grads[i] for i in present])):
            grads[i] = g
        # Reduced values are identical on every rank, so is this verdict.
        finite = precision.all_finite([grads[i] for i in present])

        def apply():
            self.inner_optimizer.apply(grads, variables)
            return tf.no_op()

        def skip():
            self.skipped.assign_add(tf.ones_like(self.skipped))
            return tf.no_op()
        tf.cond(finite, apply, skip)
        self._loss_scale.update(finite)  # precision's rule: halve on skip, grow after N

    def get_config(self):
        config = super().get_config()
        config.update(accum_steps=self.accum_steps, loss_scaling=self.loss_scaling)
        return config
