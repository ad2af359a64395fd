"""Horovod's learning-rate callbacks by Horovod's names and meaning, on Keras 3.

LearningRateScheduleCallback(initial_lr, multiplier, start_epoch, end_epoch, staircase,
momentum_correction, steps_per_epoch): inside [start_epoch, end_epoch) the rate is
initial_lr * multiplier(epoch), where a number m means m ** (epoch - start_epoch); with
staircase it changes at each epoch's first batch, else at every batch with a fractional
epoch. LearningRateWarmupCallback(initial_lr, warmup_epochs, ...): from initial_lr / size
to initial_lr over the warmup (the linear-scaling warmup, schedules.warmup_rate), one
batch ahead as Horovod's is, so the last warmup batch reaches initial_lr exactly.

momentum_correction is accepted but has no effect: Keras 3 compiles SGD's momentum into
the train step as a constant, so scaling it for one batch cannot take effect there.
"""
import keras
from absl import logging

from horovod_train import schedules
from horovod_train.errors import UsageError
from horovod_train.keras import state


class LearningRateScheduleCallback(keras.callbacks.Callback):
    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise UsageError(f"{type(self).__name__}: received initial_lr=None; expected the "
                             f"rate to schedule from. Fix: pass initial_lr=lr * hvd.size()")
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (
            lambda epoch: multiplier ** (epoch - start_epoch))
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.epoch = 0

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps")
            if not self.steps_per_epoch:
                raise UsageError(f"{type(self).__name__}: received a dataset of unknown "
                                 f"length; expected a known number of steps per epoch. Fix: "
                                 f"pass steps_per_epoch= to the callback or to fit")
        _note_momentum(self.model.optimizer, self.momentum_correction)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch < self.start_epoch or (self.end_epoch is not None
                                             and self.epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._set(self.epoch)
        else:
            self._set(self.epoch + batch / self.steps_per_epoch)

    def _set(self, epoch):
        self.model.optimizer.learning_rate = self.rate(epoch)

    def rate(self, epoch) -> float:
        return self.initial_lr * self.multiplier(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:  # Horovod logs the rate as 'lr'
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, multiplier=None, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def rate(self, epoch) -> float:
        size = state.require("LearningRateWarmupCallback").size
        progress = (epoch + 1.0 / self.steps_per_epoch) / self.warmup_epochs
        return schedules.warmup_rate(self.initial_lr / size, self.initial_lr, progress)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        strategy = state.require("LearningRateWarmupCallback")
        if self.verbose and epoch == self.warmup_epochs - 1 and strategy.is_chief:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{logs['lr'] if logs else self.initial_lr:g}.")


def _note_momentum(optimizer, wanted):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if wanted and getattr(inner, "momentum", 0):
        logging.log_first_n(logging.INFO, "htk | momentum_correction: not applied (Keras 3 "
                            "compiles the momentum into the train step); the schedule is", 1)
