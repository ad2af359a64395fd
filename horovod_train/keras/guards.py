"""Refusals shared by the strategy, the optimizer wrapper and the callbacks."""
import tensorflow as tf

from horovod_train.errors import UsageError


def native_scope_error(what):
    return UsageError(
        f"{what}: received a tf.distribute strategy scope "
        f"({type(tf.distribute.get_strategy()).__name__}); expected none. Keras 3 model.fit "
        f"under MultiWorkerMirroredStrategy fails on TF 2.21 (PerReplica conversion error). "
        f"Fix: build the model and optimizer inside htk strategy.scope() only, not inside a "
        f"tf.distribute strategy's scope")


def reject_native_strategy(what):
    if tf.distribute.has_strategy():
        raise native_scope_error(what)
