"""The CLI's train step: micro-batches in, one update out, on every rank alike.

The update itself is horovod_train.update's kernel (accumulate -> reduce -> unscale ->
finite check -> apply or skip -> loss-scale update); this module feeds it one batch of
k*b, split into k micro-batches inside the compiled step. Each rank's stop vote
(SIGTERM, stopping.py) rides in the gradients' own reduction as one more scalar, so
every rank learns at the same step that some rank must stop.

Two compiled forms compute the same update:
  - `fused`: one tf.function per step - used on almost every step, with the batch
    fetched inside the same compiled call (backend.run_step_fed, feed.py);
  - `timed`: the same work as three tf.functions (gradients / allreduce / apply) with
    a clock between them, run once per logging interval to split step time into
    compute, communication and optimizer shares. All ranks run it at the same steps.

XLA (StepOptions.jit_compile): both forms call the same two parts of one
xla_split.XlaSplit, the gradients and the update, must-compile with XLA on; the
collectives run between them, outside XLA. graph_facts() proves it on the step's graph.

Every function here is traced with autograph off: the step has no Python control flow
on tensors (the accumulation loop is an explicit tf.while_loop, the skip a tf.cond),
and autograph's rewriting of the ~25 Python functions under the step was most of the
first step's time (0.7 of 1.1 s for digits_cnn; bench/startup.py).
"""
import dataclasses
import time

import keras
import tensorflow as tf

from horovod_train import update
from horovod_train.precision import DynamicLossScale
from horovod_train.xla_split import XlaSplit, xla_collectives, xla_functions


@dataclasses.dataclass(frozen=True)
class StepOptions:
    accum_steps: int = 1
    loss_scaling: bool = False  # dynamic loss scaling (mixed_float16)
    inject_nonfinite: tuple | None = None  # (step, rank): fault injection for tests
    jit_compile: bool = False  # XLA for the gradients and the update, never the collectives


class TrainStep:
    def __init__(self, model, optimizer, backend, options: StepOptions = StepOptions(),
                 shards=None):
        self.model = model
        self.optimizer = optimizer
        self.backend = backend
        self.options = options
        # optimizer_shards.OptimizerShards, or None: the optimizer updates this rank's
        # shard (a flat variable per bucket) and the parameters come back by allgather.
        self.shards = shards
        self.variables = model.trainable_variables
        # What the optimizer updates: the parameters, or this rank's shard of them.
        self.applied = self.variables if shards is None else shards.pieces
        self.loss_scale = DynamicLossScale(options.loss_scaling)
        self.update_options = update.UpdateOptions(accum_steps=options.accum_steps)
        # One function object per part, shared by the fused and the timed step, so the
        # two compile the same way (and XLA compiles each part once per input shape).
        self.split = XlaSplit(self._grads, self._apply, options.jit_compile, autograph=False)
        self._comm_fn = tf.function(self._reduce_with_vote, autograph=False)
        self._gather_fn = tf.function(shards.gather, autograph=False) if shards else None
        self.fused = tf.function(self._fused, autograph=False)

    def tracing_count(self) -> int:
        """Traces of the step's functions so far (nested calls share a function's cache,
        so each trace counts once): a step that raised it was compiling, not training."""
        return sum(f.experimental_get_tracing_count()
                   for f in (self.fused, self._comm_fn, self._gather_fn) if f is not None) \
            + self.split.tracing_count()

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

            def add_micro_batch(i, loss, grads):
                micro_loss, micro = self._micro_grads(xs[i], ys[i])
                return i + 1, loss + micro_loss, [a + b for a, b in zip(grads, micro)]
            # A graph loop: one micro-batch's activations alive at a time.
            _, loss, grads = tf.while_loop(lambda i, *_: i < k, add_micro_batch,
                                           (tf.constant(1), loss, grads))
            loss, grads = loss / k, update.finish_accumulation(grads, self.update_options)
        if self.options.inject_nonfinite is not None:
            grads = [tf.where(poison, g * float("inf"), g) for g in grads]
        return loss, grads

    def _apply(self, grads, variables, agreed=None):
        """The kernel's update, as a float (1.0 applied, 0.0 skipped on every rank);
        `agreed`: the ranks' verdict when each holds a shard of the gradients."""
        def apply(unscaled):
            self.optimizer.apply_gradients(zip(unscaled, variables))
        if self.shards is not None:
            self.shards.refresh()
        return tf.cast(update.apply_update(grads, self.loss_scale, apply, agreed=agreed),
                       tf.float32)

    def _reduce_with_vote(self, grads, stop_vote):
        """(reduced gradients, whether any rank voted to stop, the agreed verdict or
        None): the vote is one more scalar in the gradients' own reduction, not a
        collective of its own. Sharded: the gradients are reduce-scattered, and the
        vote rides with the shards' finite verdicts in one small allreduce."""
        vote = tf.reshape(stop_vote, [1])
        if self.shards is not None:
            shard = self.shards.scatter(grads)
            _, finite = update.unscaled_and_verdict(shard, self.loss_scale)
            agreed, votes = self.shards.agree(finite, [vote])
            return shard, votes[0] > 0, agreed
        grads, (vote,) = update.reduce_gradients(
            grads, self.backend.allreduce_gradients, riders=[vote])
        return grads, vote[0] > 0, None

    def _update(self, grads, agreed):
        """The compiled update, then (sharded) the parameters gathered, outside XLA."""
        extra = () if agreed is None else (agreed,)
        finite = self.split.update(grads, self.applied, *extra)
        if self.shards is not None:
            self.shards.gather()
        return finite

    def _fused(self, x, y, poison, stop_vote):
        """(loss, finite, stop): stop is True on every rank when any rank voted."""
        loss, grads = self.split.compute(x, y, poison)
        grads, stop, agreed = self._reduce_with_vote(grads, stop_vote)
        return loss, self._update(grads, agreed), stop

    def poison(self, step: int, rank: int):
        """The fault-injection switch for this step, as a tensor (no retracing)."""
        hit = self.options.inject_nonfinite is not None and \
            tuple(self.options.inject_nonfinite) == (step, rank)
        return tf.constant(hit)

    @staticmethod
    def stop_vote(requested: bool):
        """This rank's stop vote for the next step, as a tensor (no retracing)."""
        return tf.constant(1.0 if requested else 0.0)

    def timed(self, x, y, poison, stop_vote):
        """Runs one step in three parts; returns (loss, finite, stop, {part: seconds})."""
        t0 = time.perf_counter()
        loss, grads = self.split.compute(x, y, poison)
        loss = float(loss)  # waits for the backward pass
        t1 = time.perf_counter()
        grads, stop, agreed = self._comm_fn(grads, stop_vote)
        stop = bool(stop)  # waits for the allreduce
        t2 = time.perf_counter()
        extra = () if agreed is None else (agreed,)
        finite = float(self.split.update(grads, self.applied, *extra))
        t3 = time.perf_counter()
        gathered = 0.0  # the sharded parameters' allgather: communication too
        if self.shards is not None:
            self._gather_fn()
            gathered = time.perf_counter() - t3
        return loss, finite, stop, {"compute": t1 - t0, "comm": t2 - t1 + gathered,
                                    "optimizer": t3 - t2}

    def graph_def(self, x, y):
        """The GraphDef of one fused step; x and y may be tensors or their TensorSpecs."""
        return self.backend.step_graph_def(self.fused, x, y, tf.constant(False),
                                           self.stop_vote(False))

    def collective_ops_per_step(self, x, y) -> int:
        """Collective ops in one fused step's graph, nested functions (loop bodies,
        cond branches) included: what the graph holds, whatever k is."""
        return self.graph_facts(x, y)["collective_ops_per_step"]

    def graph_facts(self, x, y) -> dict:
        """Collective ops per step, how many of them XLA would compile (must be 0), and
        how many functions it compiles (0 without --jit_compile)."""
        graph_def = self.graph_def(x, y)
        outside, inside = xla_collectives(graph_def, self.backend.collective_op_types)
        return {"collective_ops_per_step": outside + inside, "collective_ops_in_xla": inside,
                "xla_compiled_functions": len(xla_functions(graph_def))}
