"""The learning rate, once: the warmup formula (for the loop and for the Keras
callbacks), the loop's schedule built on it, and the loop's optimizer.

Linear scaling (Goyal et al.): with N ranks the global batch is N times larger, so the
rate is N times larger too, reached gradually, since a large rate at step 0 diverges.
"""
import keras


def warmup_rate(base, scaled, progress, minimum=min):
    """`base` at progress 0, rising linearly to `scaled` at progress 1, flat after.

    progress is the fraction of the warmup done (steps or epochs over the warmup
    length); `minimum` is min for Python numbers or keras.ops.minimum for tensors, so
    the compiled schedule and the Python figure for the logs share this one line."""
    return base + (scaled - base) * minimum(progress, 1.0)


class WarmupScaledRate(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from the per-replica rate to the world-size-scaled rate."""

    def __init__(self, base: float, scaled: float, warmup_steps: int):
        self.base, self.scaled, self.warmup_steps = base, scaled, warmup_steps

    def __call__(self, step):
        if self.warmup_steps <= 0:
            return keras.ops.convert_to_tensor(self.scaled, "float32")
        progress = keras.ops.cast(step, "float32") / self.warmup_steps
        return warmup_rate(self.base, self.scaled, progress, keras.ops.minimum)

    def value_at(self, step: int) -> float:
        """The rate at optimizer step `step`, in Python: reading it through the
        optimizer runs a dozen eager ops (~1 ms) per logging interval."""
        if self.warmup_steps <= 0:
            return self.scaled
        return warmup_rate(self.base, self.scaled, step / self.warmup_steps)

    def get_config(self):
        return {"base": self.base, "scaled": self.scaled, "warmup_steps": self.warmup_steps}


def lr_scale(optim, world_size: int) -> float:
    """The multiplier of a fresh start: the world size (linear scaling), or 1."""
    return float(world_size) if optim.scale_lr else 1.0


def lr_schedule(optim, world_size: int, steps_per_epoch: int, *, scale: float | None = None,
                warmup_steps: int | None = None) -> WarmupScaledRate:
    """The run's schedule. `scale` and `warmup_steps` (default: a fresh start's) are a
    resumed checkpoint's own (resume.py), so its schedule continues unchanged."""
    scale = lr_scale(optim, world_size) if scale is None else scale
    if warmup_steps is None:
        warmup_steps = int(optim.warmup_epochs * steps_per_epoch)
    return WarmupScaledRate(optim.learning_rate, optim.learning_rate * scale, warmup_steps)


def make_optimizer(optim, schedule: WarmupScaledRate):
    if optim.optimizer == "sgd":
        return keras.optimizers.SGD(schedule, momentum=optim.momentum)
    return keras.optimizers.Adam(schedule)
