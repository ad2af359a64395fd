"""XLA for model.fit under the drop-in: the step's compute compiled, its collectives not.

With jit_compile on, Keras compiles the whole train step - forward, backward and
optimizer.apply - into one XLA function, and the DistributedOptimizer's allreduce would
land inside it, where XLA cannot compile it (TF 2.21 refuses collectives on CPU; Horovod's
ops have no XLA kernels there). So on several ranks the step is split the way
horovod_train.step splits its own:
  1. the model's own train_step (forward, loss, backward, metrics) in an XLA function,
     with the optimizer recording the gradients instead of applying them;
  2. the allreduce, with the poison and accumulation bookkeeping, in Keras's outer train
     function, which is then built without XLA;
  3. unscale, finite check, loss-scale update and the inner optimizer's apply: a second
     XLA function (XlaParts.update).
evaluate() and predict() keep Keras's own XLA: they hold no collective.
"""
import tensorflow as tf
from absl import logging

from horovod_train.errors import UsageError


class XlaParts:
    """The optimizer's side (DistributedOptimizer.xla): its apply() calls recorded while
    part 1 traces, and part 3 compiled. A plain object, so Keras's attribute tracking
    leaves the recorded tensors and variables alone."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.calls = None  # a list while part 1 traces
        self.updates = {}  # ids of the variables -> their compiled update

    def update(self, grads, variables):
        key = tuple(id(v) for v in variables)
        if key not in self.updates:
            self.updates[key] = tf.function(
                lambda g: self.optimizer.unscale_check_apply(g, variables), jit_compile=True)
        self.updates[key](grads)


class SplitTrainStep:
    """Stands in for model.train_step (an instance attribute): part 1 compiled, then the
    optimizer's apply with the recorded gradients, outside XLA."""

    def __init__(self, keras_step, optimizer):
        self.keras_step = keras_step  # the model's own, a user's override included
        self.optimizer = optimizer
        self.variables = None  # what the traced step passed to apply()
        self.forward = tf.function(self._forward, jit_compile=True, reduce_retracing=True)

    def _forward(self, data):
        parts = self.optimizer.xla
        parts.calls = calls = []
        try:
            logs = self.keras_step(data)
        finally:
            parts.calls = None
        if len(calls) != 1:
            raise UsageError(f"model.fit(jit_compile=True): received a train_step that applies "
                             f"the optimizer {len(calls)} times; expected once per step. Fix: "
                             f"apply once per train_step, or compile with jit_compile=False")
        grads, self.variables = calls[0]
        return logs, grads

    def __call__(self, data):
        logs, grads = self.forward(data)
        self.optimizer.apply(grads, self.variables)
        return logs


def compile_around_collectives(model, strategy):
    """At train begin: where jit_compile is on and the step communicates, split it (see
    the module docstring). One rank has no collective, and Keras's whole-step XLA stays."""
    step, optimizer = model.train_step, model.optimizer
    split = isinstance(step, SplitTrainStep)
    if strategy.size == 1 or not model.jit_compile:
        if split:  # split by an earlier fit, recompiled without XLA since: undo it
            step.optimizer.xla = None
            del model.train_step
            model.make_train_function(force=True)
        return
    if not split or step.optimizer is not optimizer:  # first fit, or compiled anew
        model.train_step = SplitTrainStep(step.keras_step if split else step, optimizer)
    optimizer.xla = optimizer.xla or XlaParts(optimizer)
    # fit built its train function before train begin, as one XLA cluster: rebuild it
    # without, around the compiled parts. jit_compile stays on for evaluate and predict.
    model.jit_compile = False
    model.make_train_function(force=True)
    model.jit_compile = True
    if strategy.is_chief:
        logging.info("htk | jit_compile: XLA compiles the forward/backward pass and the "
                     "optimizer update; the allreduce runs between them, outside XLA")
