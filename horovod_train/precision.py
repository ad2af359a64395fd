"""Mixed precision and loss scaling, in one place.

We keep our own dynamic loss scale rather than keras.optimizers.LossScaleOptimizer:
that one unscales and checks finiteness on each rank's *local* gradients, before
any communication, so ranks could decide differently and hang. Here the step
allreduces the scaled gradients first, then unscales and checks, so every rank
sees the same numbers and takes the same skip-or-apply decision.
"""
import keras
import tensorflow as tf

POLICIES = {"fp32": "float32", "mixed_float16": "mixed_float16", "mixed_bfloat16": "mixed_bfloat16"}


def uses_loss_scaling(policy: str) -> bool:
    """The one precision rule: float16's narrow range loses small gradients, so it
    always comes with dynamic loss scaling; bfloat16 has float32's range and needs none.
    `policy` is our --precision name or a Keras policy name (they agree on these)."""
    return policy == "mixed_float16"


def set_policy(precision: str):
    """Sets the global Keras policy before models are built: compute in 16 bits,
    variables in float32 (the models force float32 logits)."""
    keras.mixed_precision.set_global_policy(POLICIES[precision])


class DynamicLossScale:
    """Scale starts high, halves on a non-finite step, doubles after `growth_interval`
    finite steps. Plain tf.Variables so checkpoints can carry the scale."""

    def __init__(self, enabled: bool, initial: float = 2.0 ** 15, growth_interval: int = 2000,
                 variables=None):
        """`variables`: an existing (scale, good_steps) pair to run the rule on, e.g. the
        Keras optimizer's own variables, which are saved and broadcast with it."""
        self.enabled = bool(enabled)
        self.growth_interval = int(growth_interval)
        if variables is not None:
            self.scale, self.good_steps = variables
            return
        self.scale = tf.Variable(initial if enabled else 1.0, trainable=False, dtype=tf.float32,
                                 name="loss_scale")
        self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64, name="loss_scale_good_steps")

    def scale_loss(self, loss):
        return loss * tf.cast(self.scale, loss.dtype) if self.enabled else loss

    def unscale(self, grads):
        if not self.enabled:
            return grads
        inverse = 1.0 / self.scale
        return [g * tf.cast(inverse, g.dtype) for g in grads]

    def update(self, finite):
        """Called every step with the (agreed) finiteness of the reduced gradients."""
        if not self.enabled:
            return
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.growth_interval)
        new_scale = tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                             tf.maximum(self.scale / 2.0, 1.0))
        self.scale.assign(new_scale)
        self.good_steps.assign(tf.where(tf.logical_and(finite, tf.logical_not(grow)),
                                        self.good_steps + 1, 0))


def all_finite(grads):
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
