"""XLA for model.fit under the drop-in: the step's compute compiled, its collectives not.

With jit_compile on, Keras compiles the whole train step - forward, backward and
optimizer.apply - into one XLA function, and the DistributedOptimizer's allreduce would
land inside it, where XLA cannot compile it. So on several ranks the step is split by
the package's one rule, horovod_train.xla_split.XlaSplit (the CLI step's too):
  1. compute: the model's own train_step (forward, loss, backward, metrics) in an XLA
     function, with the optimizer recording the gradients instead of applying them;
  2. the reduction, with the poison and accumulation bookkeeping, in Keras's outer
     train function, which is then built without XLA;
  3. update: the kernel's unscale, finite check, apply and loss-scale update, the
     split's second XLA function (DistributedOptimizer.unscale_check_apply).
evaluate() and predict() keep Keras's own XLA: they hold no collective.
"""
from absl import logging

from horovod_train.errors import UsageError
from horovod_train.xla_split import XlaSplit


class SplitTrainStep:
    """Stands in for model.train_step (an instance attribute) and is the optimizer's
    `xla`: part 1 compiled, then the optimizer's apply with the recorded gradients,
    outside XLA, whose update runs in part 3. A plain object, so Keras's attribute
    tracking leaves the recorded tensors and variables alone."""

    def __init__(self, keras_step, optimizer):
        self.keras_step = keras_step  # the model's own, a user's override included
        self.optimizer = optimizer
        self.variables = None  # what the traced step passed to apply()
        self.calls = None  # a list while part 1 traces: the optimizer's apply() records
        self.split = XlaSplit(self._forward, optimizer.unscale_check_apply, jit_compile=True,
                              reduce_retracing=True)

    def update(self, grads, variables):
        """Part 3, called by the optimizer after the reduction."""
        self.split.update(grads, variables)

    def _forward(self, data):
        self.calls = calls = []
        try:
            logs = self.keras_step(data)
        finally:
            self.calls = None
        if len(calls) != 1:
            raise UsageError(f"model.fit(jit_compile=True): received a train_step that applies "
                             f"the optimizer {len(calls)} times; expected once per step. Fix: "
                             f"apply once per train_step, or compile with jit_compile=False")
        grads, self.variables = calls[0]
        return logs, grads

    def __call__(self, data):
        logs, grads = self.split.compute(data)
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
    optimizer.xla = model.train_step
    # fit built its train function before train begin, as one XLA cluster: rebuild it
    # without, around the compiled parts. jit_compile stays on for evaluate and predict.
    model.jit_compile = False
    model.make_train_function(force=True)
    model.jit_compile = True
    if strategy.is_chief:
        logging.info("htk | jit_compile: XLA compiles the forward/backward pass and the "
                     "optimizer update; the allreduce runs between them, outside XLA")
