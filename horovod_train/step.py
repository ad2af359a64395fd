"""The train step: micro-batches, accumulation, allreduce, finite check, apply.

Order matters for correctness across ranks:
  1. k micro-batches' gradients are summed locally (one batch of k*b arrives and is
     split), scaled by the loss scale;
  2. ONE allreduce of the accumulated, still-scaled gradients;
  3. unscale, check finiteness (on reduced values, so every rank takes the same verdict);
  4. apply, or skip the step on every rank together; the loss scale adapts.
Each rank's stop vote (SIGTERM, stopping.py) rides in the same allreduce as one more
scalar, so every rank learns at the same step that some rank must stop.

Two compiled forms compute the same update:
  - `fused`: one tf.function per step - used on almost every step, with the batch
    fetched inside the same compiled call (backend.run_step_fed, feed.py);
  - `timed`: the same work as three tf.functions (gradients / allreduce / apply) with
    a clock between them, run once per logging interval to split step time into
    compute, communication and optimizer shares. All ranks run it at the same steps.

XLA (StepOptions.jit_compile): both forms call the same two nested functions, the
gradients (1) and the update (3-4), and with XLA on those two are must-compile. The
collectives of (2) sit between them in the outer function, which XLA never compiles:
TF 2.21's XLA refuses collectives on CPU ("Collectives are not yet implemented for CPU
devices when compiling with XLA"), and Horovod's ops have XLA kernels only in GPU
builds that enable them. xla_collectives() checks a step's graph for exactly that.
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
    jit_compile: bool = False  # XLA for the gradients and the update, never the collectives


class TrainStep:
    def __init__(self, model, optimizer, backend, options: StepOptions = StepOptions()):
        self.model = model
        self.optimizer = optimizer
        self.backend = backend
        self.options = options
        self.variables = model.trainable_variables
        with backend.scope():
            self.loss_scale = DynamicLossScale(options.loss_scaling)
        # One function object per part, shared by the fused and the timed step, so the
        # two compile the same way (and XLA compiles each part once per input shape).
        self._grads_fn = tf.function(self._grads, jit_compile=options.jit_compile)
        self._apply_fn = tf.function(self._apply, jit_compile=options.jit_compile)
        self._comm_fn = tf.function(self._reduce)
        self.fused = tf.function(self._fused)

    def tracing_count(self) -> int:
        """Traces of the step's functions so far (nested calls share a function's cache,
        so each trace counts once): a step that raised it was compiling, not training."""
        return sum(f.experimental_get_tracing_count() for f in
                   (self.fused, self._grads_fn, self._apply_fn, self._comm_fn))

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
        """Unscale, check, adapt the scale, apply or skip. Called with reduced gradients:
        they are the same on every rank, so is the verdict, and all ranks skip together."""
        grads = self.loss_scale.unscale(grads)
        finite = all_finite(grads)
        self.loss_scale.update(finite)

        def apply():
            self.optimizer.apply_gradients(zip(grads, self.variables))
            return tf.no_op()
        tf.cond(finite, apply, tf.no_op)
        return tf.cast(finite, tf.float32)

    def _reduce_with_vote(self, grads, stop_vote):
        """(reduced gradients, whether any rank voted to stop): the vote is one more
        scalar in the gradients' own grouped allreduce, not a collective of its own."""
        reduced = self.backend.allreduce_gradients(list(grads) + [tf.reshape(stop_vote, [1])])
        return reduced[:-1], reduced[-1][0] > 0

    def _reduce(self, grads, stop_vote):
        return self.backend.run_replica(self._reduce_with_vote, grads, stop_vote)

    def _reduced_grads(self, x, y, poison, stop_vote):
        loss, grads = self._grads_fn(x, y, poison)
        return (loss, *self._reduce_with_vote(grads, stop_vote))

    def _fused(self, x, y, poison, stop_vote):
        """(loss, finite, stop): stop is True on every rank when any rank voted."""
        # Gradients and their reduction in this rank's replica (mwms: strategy.run);
        # the update outside it, where the Keras optimizer sends nothing more.
        loss, grads, stop = self.backend.run_replica(self._reduced_grads, x, y, poison, stop_vote)
        return loss, self._apply_fn(grads), stop

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
        loss, grads = self._grads_fn(x, y, poison)
        loss = float(loss)  # waits for the backward pass
        t1 = time.perf_counter()
        grads, stop = self._comm_fn(grads, stop_vote)
        stop = bool(stop)  # waits for the allreduce
        t2 = time.perf_counter()
        finite = float(self._apply_fn(grads))
        t3 = time.perf_counter()
        return loss, finite, stop, {"compute": t1 - t0, "comm": t2 - t1, "optimizer": t3 - t2}

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


# The attribute TF puts on a tf.function(jit_compile=True) and on the node calling it.
XLA_MUST_COMPILE = "_XlaMustCompile"


def _called_functions(node) -> list[str]:
    """Library functions a node runs: a call's f, a loop's cond/body, a cond's branches."""
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def _must_compile(attrs) -> bool:
    return XLA_MUST_COMPILE in attrs and attrs[XLA_MUST_COMPILE].b


def xla_functions(graph_def) -> set[str]:
    """Library functions XLA compiles: those marked must-compile (or called by a node
    so marked) and everything they call, through loops, conds and nested calls."""
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes = list(graph_def.node) + [n for f in library.values() for n in f.node_def]
    pending = [name for name, f in library.items() if _must_compile(f.attr)]
    pending += [name for n in nodes if _must_compile(n.attr) for name in _called_functions(n)]
    compiled = set()
    while pending:
        name = pending.pop()
        if name in compiled or name not in library:
            continue
        compiled.add(name)
        pending.extend(c for n in library[name].node_def for c in _called_functions(n))
    return compiled


def xla_collectives(graph_def, op_types) -> tuple[int, int]:
    """(collective ops outside XLA, collective ops inside XLA-compiled functions)."""
    compiled = xla_functions(graph_def)
    outside = sum(n.op in op_types for n in graph_def.node)
    inside = 0
    for function in graph_def.library.function:
        count = sum(n.op in op_types for n in function.node_def)
        if function.signature.name in compiled:
            inside += count
        else:
            outside += count
    return outside, inside


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
