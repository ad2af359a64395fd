"""The optimizer wrapper: Horovod's DistributedOptimizer surface over the update kernel.

A keras.optimizers.LossScaleOptimizer subclass, so that compile() under mixed_float16
does not wrap it in Keras's own, which would decide finiteness on each rank's local
gradients (ranks could disagree and hang). The update is horovod_train.update's, the
CLI step's own: accumulate, reduce (the backend's allreduce_gradients with Horovod's options),
unscale, check finiteness on the reduced values, apply or skip on every rank alike,
adapt the loss scale.
"""
import types

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import precision, update
from horovod_train.backends.comm import ReduceOp
from horovod_train.errors import UsageError
from horovod_train.keras import divergence_guard, hvd_options, state
from horovod_train.keras.hvd_options import DEFAULT_DIVERGENCE_CHECK_STEPS
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

    # Horovod's signature, in Horovod's order, then ours (keyword only).
    def __init__(self, optimizer, name=None, device_dense="", device_sparse="",
                 compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                 op=None, backward_passes_per_step=1, average_aggregated_gradients=False,
                 num_groups=0, groups=None, process_set=None, scale_local_gradients=True, *,
                 accum_steps=None, loss_scaling="auto", initial_scale=2.0 ** 15,
                 dynamic_growth_steps=2000,
                 divergence_check_steps=DEFAULT_DIVERGENCE_CHECK_STEPS,
                 shard_optimizer_state=False, **kwargs):
        opts = hvd_options.resolve(
            compression=compression, op=op, gradient_predivide_factor=gradient_predivide_factor,
            backward_passes_per_step=backward_passes_per_step, accum_steps=accum_steps,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            num_groups=num_groups, process_set=process_set,
            divergence_check_steps=divergence_check_steps)
        inner_optimizer, loss_scaling, initial_scale, dynamic_growth_steps = unwrap_optimizer(
            optimizer, opts.accum_steps, loss_scaling, initial_scale, dynamic_growth_steps)
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps,
                         name=name or f"Distributed{type(inner_optimizer).__name__}", **kwargs)
        self.opts = opts
        self.accum_steps = opts.accum_steps
        self.loss_scaling = bool(loss_scaling)
        self.scale_local_gradients = bool(scale_local_gradients)
        self._local_ids = set()  # register_local_var: reduced nowhere, scaled by 1/size
        self._reduced_ids = set()  # gradients compute_gradients already reduced
        self._strategy = None  # bound by Strategy.distributed_optimizer, else the active one
        self._inject = None
        self.xla = None  # jit.SplitTrainStep, once fit compiles around the collectives
        self.verdict = divergence_guard.Verdict()  # the in-step divergence check's
        # The trainer's --shard_optimizer_state (optimizer_shards.py), built with the
        # optimizer: the inner optimizer's slots for this rank's shard only.
        self.shard_optimizer_state = bool(shard_optimizer_state)
        self.shards = None
        self.update_options = update.UpdateOptions(
            accum_steps=opts.accum_steps, mean_of_micro_batches=opts.mean_of_micro_batches,
            sum_over_ranks=opts.op is ReduceOp.SUM,
            scale_local_gradients=self.scale_local_gradients)
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
            self._accumulator = update.Accumulator(
                var_list, lambda v: self.add_variable_from_reference(v, name="accumulated_grad"),
                self.update_options)
        if self.shard_optimizer_state:
            self.shards = self._shards(var_list)
        else:
            self.inner_optimizer.build(var_list)
        keras.optimizers.Optimizer.build(self, var_list)

    def _shards(self, var_list):
        """The sharded state over `var_list`; what it cannot do is refused here, once."""
        from horovod_train.optimizer_shards import OptimizerShards
        backend = self.strategy.backend
        compressed = self.opts.wire not in (None, "none") or (
            self.opts.compressor is None and backend.compression != "none")
        if self.opts.op is ReduceOp.SUM or self._local_ids or compressed:
            raise UsageError("DistributedOptimizer: received shard_optimizer_state=True with "
                             "op=Sum, local variables or compression; expected the plain "
                             "average. Fix: drop those options, or shard_optimizer_state")
        return OptimizerShards(var_list, self.inner_optimizer, backend, backend.bucket_bytes)

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
        if self._reduced_ids and all(id(g) in self._reduced_ids for g in grads if g is not None):
            self._reduced_ids.clear()  # from compute_gradients: reduced already
            self._update(grads, variables)
        elif self.accum_steps == 1:
            self._update(self.reduce(self._poisoned(grads), variables), variables)
        else:
            self._accumulator.add(self._poisoned(grads), self._iterations,
                                  lambda total: self._update(self.reduce(total, variables),
                                                             variables))
        self._iterations.assign_add(1)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        """Keras's apply_gradients; Keras 2's extra arguments (Horovod's tests pass
        experimental_aggregate_gradients=False) change nothing here and are dropped."""
        grads_and_vars = list(grads_and_vars)
        grads, variables = zip(*grads_and_vars) if grads_and_vars else ((), ())
        self.apply(list(grads), list(variables))
        return self._iterations

    def compute_gradients(self, loss, var_list, tape=None):
        """Horovod's (and Keras 2's) compute_gradients: [(gradient, variable)], the
        gradients already averaged over ranks (without accumulation: with it, the
        reduction waits for the k-th apply). `loss` is a tensor recorded on `tape`, or
        a callable that is recorded here."""
        var_list = list(var_list)
        if callable(loss):
            tape = tape or tf.GradientTape()
            with tape:
                tape.watch([_plain(v) for v in var_list])
                loss = loss()
        if tape is None:
            raise UsageError("compute_gradients: received a loss tensor without its tape; "
                             "expected tape= (the GradientTape that recorded it) or a callable "
                             "loss. Fix: pass tape=tape, or loss=lambda: ...")
        grads = tape.gradient(loss, [_plain(v) for v in var_list])
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        if self.accum_steps == 1:
            if not self.built:
                self.build(var_list)
            if self.shards is not None:
                raise UsageError("compute_gradients: received a call on an optimizer with "
                                 "shard_optimizer_state=True, whose reduced gradients are "
                                 "this rank's shard only; expected apply(). Fix: call "
                                 "apply_gradients with the local gradients")
            grads = self.reduce(grads, var_list)
            self._reduced_ids = {id(g) for g in grads if g is not None}
        return list(zip(grads, var_list))

    _compute_gradients = compute_gradients  # the name Keras 2 (and Horovod's tests) use

    def register_local_var(self, var):
        """Horovod's worker-local variable: its gradient is not reduced over ranks (it is
        divided by the world size when scale_local_gradients, as Horovod does)."""
        self._local_ids.add(id(var))

    @property
    def iterations(self):
        """Horovod's meaning with backward_passes_per_step (every backward pass), ours
        with accum_steps (applied updates, Keras's LossScaleOptimizer's)."""
        if self.opts.iterations_count_passes:
            return self._iterations
        return self.inner_optimizer.iterations

    @property
    def _agg_helper(self):
        """What Horovod's tests read of its accumulation: `counter`, the micro-batches
        accumulated since the last update (None without accumulation, as Horovod's)."""
        if self.accum_steps == 1:
            return None
        return types.SimpleNamespace(counter=self._iterations % self.accum_steps)

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

    def _update(self, grads, variables):
        """After the reduction: rank 0's state at the first update, the kernel's update
        (in the XLA split's compiled part when fit compiles around the collectives),
        then the in-step divergence check. Sharded: `grads` is this rank's shard."""
        self._sync_at_first_update(variables)
        if self.shards is not None:
            self._sharded_update(grads)
        elif self.xla is not None:
            self.xla.update(grads, variables)
        else:
            self.unscale_check_apply(grads, variables)
        self._check_divergence(variables)

    def _sharded_update(self, shard):
        """The kernel on this rank's shard, the verdict agreed over ranks, then every
        rank's updated elements gathered into the parameters."""
        if self.xla is not None:
            raise UsageError("DistributedOptimizer: received shard_optimizer_state=True "
                             "under compile(jit_compile=True); expected jit_compile=False "
                             "(the sharded update gathers between its parts). Fix: compile "
                             "with jit_compile=False, or drop shard_optimizer_state")
        _, finite = update.unscaled_and_verdict(shard, self._loss_scale)
        agreed, _ = self.shards.agree(finite, [])
        self.shards.refresh()
        update.apply_update(
            shard, self._loss_scale,
            lambda unscaled: self.inner_optimizer.apply(unscaled, self.shards.pieces),
            on_skip=lambda: self.skipped.assign_add(tf.ones_like(self.skipped)), agreed=agreed)
        self.shards.gather()

    def reduce(self, grads, variables) -> list:
        """The gradients over ranks (op, compression), local variables' kept local;
        sharded, this rank's shard of their mean (a tensor per bucket)."""
        if self.shards is not None:
            return self.shards.scatter(grads)
        reduce = hvd_options.gradient_mean(self.strategy.backend, self.opts)
        return update.reduce_gradients(
            grads, reduce, local=[id(v) in self._local_ids for v in variables],
            size=self.strategy.size, options=self.update_options)[0]

    def _sync_at_first_update(self, variables):
        """Rank 0's model and optimizer state on every rank before the first update,
        whether or not a broadcast callback runs: a script that forgets it still trains
        one model. Once: the condition is the inner optimizer's update count."""
        if self.strategy.size == 1:
            return
        ops = self.strategy.backend.comm
        state = _unique(list(variables) + list(self.variables))

        def sync():
            ops.broadcast_variables(state, root_rank=0)
            return tf.no_op()
        tf.cond(tf.equal(self.inner_optimizer.iterations, 0), sync, tf.no_op)

    def _check_divergence(self, variables):
        every = self.opts.divergence_check_steps
        if every and self.strategy.size > 1:
            divergence_guard.in_step(self.strategy.backend, variables,
                                     self.inner_optimizer.iterations, every, self.verdict)

    def unscale_check_apply(self, grads, variables):
        """The kernel's update with this optimizer's parts: the inner optimizer applies,
        a skip is counted, the scale is the optimizer's own variables."""
        update.apply_update(grads, self._loss_scale,
                            lambda unscaled: self.inner_optimizer.apply(unscaled, variables),
                            on_skip=lambda: self.skipped.assign_add(tf.ones_like(self.skipped)))

    @classmethod
    def from_config(cls, config, custom_objects=None):
        # Keras's pops the inner optimizer out of the caller's dict; Horovod's test (and
        # any caller) may reuse that dict, so read a copy.
        return super().from_config(dict(config), custom_objects=custom_objects)

    def get_config(self):
        config = super().get_config()
        config.update(loss_scaling=self.loss_scaling,
                      scale_local_gradients=self.scale_local_gradients,
                      shard_optimizer_state=self.shard_optimizer_state,
                      **hvd_options.to_config(self.opts))
        return config


def PartialDistributedOptimizer(optimizer, name=None, local_layers=None, **kwargs):
    """Horovod's (horovod.keras): a DistributedOptimizer whose `local_layers` keep their
    gradients on each rank (registered with register_local_var)."""
    opt = DistributedOptimizer(optimizer, name=name, **kwargs)
    layers = [] if local_layers is None else (
        local_layers if isinstance(local_layers, (list, tuple)) else [local_layers])
    for layer in layers:
        for variable in layer.trainable_weights:
            opt.register_local_var(variable)
    return opt


def _unique(variables) -> list:
    seen, out = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _plain(variable):
    """What a GradientTape differentiates against: the tf.Variable a Keras 3 variable
    wraps (a tf.Variable is its own)."""
    return variable if isinstance(variable, tf.Variable) else getattr(variable, "value", variable)
