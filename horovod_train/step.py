"""The train step: micro-batches, accumulation, allreduce, finite check, apply.

Order matters for correctness across ranks:
  1. k micro-batches' gradients are summed locally (one batch of k*b arrives and is
     split), scaled by the loss scale;
  2. ONE allreduce of the accumulated, still-scaled gradients;
  3. unscale, check finiteness, agree (on reduced values, so every rank agrees);
  4. apply, or skip the step on every rank together; the loss scale adapts.

Two compiled forms compute the same update:
  - `fused`: one tf.function per step - used on almost every step, with the batch
    fetched inside the same compiled call (backend.run_step_fed, feed.py);
  - `timed`: the same work as three tf.functions (gradients / allreduce / apply) with
    a clock between them, run once per logging interval to split step time into
    compute, communication and optimizer shares. All ranks run it at the same steps.
"""
import dataclasses
import time

import keras
import tensorflow as tf

from horovod_train.precision import DynamicLossScale, all_finite


@dataclasses.dataclass(frozen=True)
class StepOptions:
    accum_steps: int = 1
    loss_scaling: bool = False  # dynamic loss scaling (mixed_float16)
    inject_nonfinite: tuple | None = None  # (step, rank): fault injection for tests


class TrainStep:
    def __init__(self, model, optimizer, backend, options: StepOptions = StepOptions()):
        self.model = model
        self.optimizer = optimizer
        self.backend = backend
        self.options = options
        self.variables = model.trainable_variables
        with backend.scope():
            self.loss_scale = DynamicLossScale(options.loss_scaling)
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

    def _micro_grads(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = self.loss_fn(y, logits)
            scaled = self.loss_scale.scale_loss(loss)
        # Differentiate w.r.t. the tf.Variables inside the Keras 3 variables: those are
        # what Horovod and the tape track reliably.
        grads = tape.gradient(scaled, [v.value for v in self.variables])
        return loss, [tf.convert_to_tensor(g) for g in grads]  # IndexedSlices -> dense

    def _grads(self, x, y, poison):
        k = self.options.accum_steps
        if k == 1:
            loss, grads = self._micro_grads(x, y)
        else:
            xs = tf.reshape(x, [k, -1, *x.shape[1:]])
            ys = tf.reshape(y, [k, -1, *y.shape[1:]])
            loss, grads = self._micro_grads(xs[0], ys[0])
            for i in tf.range(1, k):  # a graph loop: one set of activations at a time
                micro_loss, micro = self._micro_grads(xs[i], ys[i])
                loss += micro_loss
                grads = [a + b for a, b in zip(grads, micro)]
            # Mean of k equal micro-batch means == the mean over the k*b batch.
            loss, grads = loss / k, [g / k for g in grads]
        if self.options.inject_nonfinite is not None:
            grads = [tf.where(poison, g * float("inf"), g) for g in grads]
        return loss, grads

    def _apply(self, grads):
        grads = self.loss_scale.unscale(grads)
        finite = self.backend.agree_all_finite(all_finite(grads))
        self.loss_scale.update(finite)
        self.backend.apply_gradients(self.optimizer, grads, self.variables, finite)
        return tf.cast(finite, tf.float32)

    def _fused(self, x, y, poison):
        loss, grads = self._grads(x, y, poison)
        return loss, self._apply(self.backend.allreduce_gradients(grads))

    def poison(self, step: int, rank: int):
        """The fault-injection switch for this step, as a tensor (no retracing)."""
        hit = self.options.inject_nonfinite is not None and \
            tuple(self.options.inject_nonfinite) == (step, rank)
        return tf.constant(hit)

    def timed(self, x, y, poison):
        """Runs one step in three parts; returns (loss, finite, {part: seconds})."""
        t0 = time.perf_counter()
        loss, grads = self._grads_fn(x, y, poison)
        loss = float(loss)  # waits for the backward pass
        t1 = time.perf_counter()
        grads = self._comm_fn(grads)
        _ = grads[-1].numpy()  # waits for the allreduce
        t2 = time.perf_counter()
        finite = float(self._apply_fn(grads))
        t3 = time.perf_counter()
        return loss, finite, {"compute": t1 - t0, "comm": t2 - t1, "optimizer": t3 - t2}

    def collective_ops_per_step(self, x, y) -> int:
        """Collective ops in one fused step's graph, nested functions (loop bodies,
        cond branches) included: what the graph holds, whatever k is. x and y may be
        tensors or their TensorSpecs."""
        graph_def = self.backend.step_graph_def(self.fused, x, y, tf.constant(False))
        nodes = list(graph_def.node)
        for function in graph_def.library.function:
            nodes.extend(function.node_def)
        return sum(1 for node in nodes if node.op in self.backend.collective_op_types)


def evaluate(model, dataset, backend) -> tuple[float, float, int]:
    """(accuracy, mean loss, predictions) over every rank's shard of the test set.

    Counts are per predicted label, so a language model's tokens count one by one."""
    correct = total = 0
    loss_sum = 0.0
    for x, y in dataset:
        logits = model(x, training=False)
        y = tf.cast(y, tf.int32)
        pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct += int(tf.reduce_sum(tf.cast(pred == y, tf.int32)))
        total += int(tf.size(y))
        losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        loss_sum += float(tf.reduce_sum(tf.cast(losses, tf.float64)))
    # Sum over ranks via mean * size: the interface keeps one reduction op.
    sums = backend.allreduce_mean(tf.constant([correct, total, loss_sum], tf.float64))
    correct, total, loss_sum = (float(v) * backend.info.size for v in sums.numpy())
    total = round(total)
    return round(correct) / max(total, 1), loss_sum / max(total, 1), total
