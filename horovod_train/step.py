"""The train step: forward, backward, allreduce, apply.

Two compiled forms compute the same update:
  - `fused`: one tf.function per step - the fast path used on almost every step;
  - `timed`: the same work as three tf.functions (gradients / allreduce / apply)
    with a clock between them - run once per logging interval to split step time
    into compute, communication and optimizer shares without slowing other steps.
All ranks run the timed form at the same steps (it is keyed on the step number),
so the collectives inside it always match up.
"""
import time

import keras
import tensorflow as tf


class TrainStep:
    def __init__(self, model, optimizer, backend):
        self.model = model
        self.optimizer = optimizer
        self.backend = backend
        self.variables = model.trainable_variables
        self.fused = tf.function(self._fused)
        self._grads_fn = tf.function(self._grads)
        self._comm_fn = tf.function(backend.allreduce_gradients)
        self._apply_fn = tf.function(self._apply)

    @staticmethod
    def loss_fn(y, logits):
        # The per-example function and our own mean, not a keras.losses.Loss object:
        # those divide by the replica count under tf.distribute, which would scale
        # mwms gradients twice. Here the loss is this rank's batch mean everywhere.
        per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        return tf.reduce_mean(per_example)

    def _grads(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = self.loss_fn(y, logits)
        # Differentiate w.r.t. the tf.Variables inside the Keras 3 variables: those are
        # what Horovod and the tape track reliably.
        grads = tape.gradient(loss, [v.value for v in self.variables])
        return loss, grads

    def _apply(self, grads):
        self.backend.apply_gradients(self.optimizer, grads, self.variables)

    def _fused(self, x, y):
        loss, grads = self._grads(x, y)
        self._apply(self.backend.allreduce_gradients(grads))
        return loss

    def timed(self, x, y):
        """Runs one step in three parts; returns (loss, {part: seconds})."""
        t0 = time.perf_counter()
        loss, grads = self._grads_fn(x, y)
        loss = float(loss)  # waits for the backward pass
        t1 = time.perf_counter()
        grads = self._comm_fn(grads)
        _ = grads[-1].numpy()  # waits for the allreduce
        t2 = time.perf_counter()
        self._apply_fn(grads)
        t3 = time.perf_counter()
        return loss, {"compute": t1 - t0, "comm": t2 - t1, "optimizer": t3 - t2}


def evaluate(model, dataset, backend) -> tuple[float, int]:
    """Accuracy over every rank's shard of the test set: (accuracy, examples)."""
    correct = total = 0
    for x, y in dataset:
        logits = model(x, training=False)
        pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct += int(tf.reduce_sum(tf.cast(pred == y, tf.int32)))
        total += int(tf.shape(y)[0])
    # Sum over ranks via mean * size: the interface keeps one reduction op.
    sums = backend.allreduce_mean(tf.constant([correct, total], tf.float64)) * backend.info.size
    correct, total = (round(float(v)) for v in sums.numpy())
    return correct / max(total, 1), total
