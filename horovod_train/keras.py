"""The drop-in API for people who keep their own Keras 3 `model.fit` script.

    import horovod_train.keras as htk
    strategy = htk.Strategy(backend="auto")            # first, before any TF op
    x, y = strategy.shard((x, y))                      # this rank's share
    with strategy.scope():
        model = build_model()
        opt = strategy.distributed_optimizer(keras.optimizers.Adam(lr * strategy.size))
        model.compile(optimizer=opt, ...)
    model.fit(x, y, callbacks=strategy.callbacks(checkpoint="ckpt.keras"))

Every backend runs Keras undistributed inside each process: `model.fit`, `evaluate` and
`predict` see a plain model and this rank's plain data, and the optimizer wrapper does
the one cross-rank step (an allreduce of the gradients) before it applies them. So
- horovod: the reduction is the backend's grouped Horovod allreduce.
- mwms: Keras 3 `fit` under MultiWorkerMirroredStrategy fails on TF 2.21 ("unsupported
  type PerReplica"), so the model is NOT built in the MWMS scope. The strategy only
  configures TF's collective runtime, and the wrapper reduces with CollectiveReduceV2
  ops on it, one per gradient dtype and step.
Loss scaling wraps the reduction (as in horovod_train.step): scaled gradients are
reduced, then unscaled and checked, so every rank sees the same numbers and skips or
applies the same steps. With compile(jit_compile=True), XLA compiles the step's compute
and the update, and the reduction runs between them (keras_jit.py).
"""
import contextlib
import types
import weakref
import zlib

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import backends, env, runtime
from horovod_train.errors import UsageError

_ACTIVE = None  # the process's Strategy: a job is joined once per process
_MWMS_GROUP_KEY = 1_213_004_870  # far above the keys MWMS allocates (from 1 upwards)
_SHARDED_DATASETS = weakref.WeakSet()
_SHARDED_ARRAYS = weakref.WeakValueDictionary()  # id -> array we returned from shard()


class Strategy:
    """Joins the data-parallel job and hands out the pieces a Keras script needs."""

    def __init__(self, backend="auto", intra_op_threads=0, inter_op_threads=0, **backend_options):
        global _ACTIVE
        launch = env.launch_info()
        name = backends.resolve(backend, launch)
        if _ACTIVE is not None:
            if _ACTIVE.backend_name != name:
                raise UsageError(f"htk.Strategy(backend={backend!r}): received a second strategy "
                                 f"({name}) in a process joined with {_ACTIVE.backend_name}; "
                                 f"expected one per process. Fix: create htk.Strategy once")
            self.__dict__.update(_ACTIVE.__dict__)
            return
        self.backend_name = name
        self.backend = backends.create(name, **backend_options)
        threads = types.SimpleNamespace(intra_op_threads=intra_op_threads,
                                        inter_op_threads=inter_op_threads)
        self.threads = runtime.configure_threads(threads, launch.local_size)
        try:
            # setup() also pins this rank's GPU (devices.pin_gpu), as for the CLI.
            self.info = self.backend.setup()
        except RuntimeError as err:
            if "must be configured at program startup" not in str(err):
                raise
            raise UsageError(
                f"htk.Strategy(backend='{name}'): TensorFlow already ran ops, so "
                f"MultiWorkerMirroredStrategy cannot configure its collectives ({err}); expected "
                f"the strategy to come first. Fix: create htk.Strategy() at the top of the "
                f"script, before building models or running TF ops") from None
        self._reduce = _graph_reducer(self.backend)
        _ACTIVE = self
        runtime.quiet_non_chief(self.is_chief)
        if self.is_chief:
            logging.info("htk | backend %s | ranks %d (local %d) | threads intra %d inter %d",
                         name, self.size, self.info.local_size, *self.threads)

    rank = property(lambda self: self.info.rank)
    size = property(lambda self: self.info.size)
    local_rank = property(lambda self: self.info.local_rank)
    local_size = property(lambda self: self.info.local_size)
    is_chief = property(lambda self: self.info.is_chief)

    def __repr__(self):
        return f"htk.Strategy(backend={self.backend_name!r}, rank={self.rank}, size={self.size})"

    @contextlib.contextmanager
    def scope(self):
        """Where to build the model and its optimizer.

        Deliberately not MWMS's own scope: Keras 3 fit fails under it on TF 2.21, so
        Keras stays undistributed and the optimizer wrapper reduces across ranks."""
        reject_native_strategy("strategy.scope()")
        with self.backend.scope() if self.backend_name != "mwms" else contextlib.nullcontext():
            yield self

    def distributed_optimizer(self, optimizer, accum_steps=1, loss_scale="auto",
                              initial_scale=2.0 ** 15, dynamic_growth_steps=2000,
                              inject_nonfinite=None):
        """A Keras 3 optimizer that averages gradients over ranks before applying them.

        accum_steps=k: k calls (micro-batches) accumulate locally, then one allreduce
        and one update. loss_scale: "auto" (dynamic when the global policy is
        mixed_float16), True/"dynamic" or False. A keras LossScaleOptimizer passed in is
        unwrapped: its scaling moves around the reduction. inject_nonfinite=(call, rank)
        is a test hook: that rank's gradients are inf on that apply call (1-based)."""
        from horovod_train.keras_callbacks import unwrap_optimizer
        optimizer, loss_scale, initial_scale, dynamic_growth_steps = unwrap_optimizer(
            optimizer, accum_steps, loss_scale, initial_scale, dynamic_growth_steps)
        opt = DistributedOptimizer(optimizer, accum_steps=accum_steps, loss_scaling=loss_scale,
                                   initial_scale=initial_scale,
                                   dynamic_growth_steps=dynamic_growth_steps)
        opt._strategy = self
        opt._inject = tuple(int(v) for v in inject_nonfinite) if inject_nonfinite else None
        return opt

    def shard(self, data):
        """This rank's share: a tf.data.Dataset (element-wise, equal counts when the
        size is known) or numpy arrays (an array, or a tuple/list/dict of them)."""
        from horovod_train.keras_callbacks import shard_arrays, shard_dataset
        if isinstance(data, tf.data.Dataset):
            return shard_dataset(data, self.rank, self.size, _SHARDED_DATASETS)
        return shard_arrays(data, self.rank, self.size, _SHARDED_ARRAYS)

    def distribute_dataset(self, dataset_fn):
        """dataset_fn(tf.distribute.InputContext) -> this rank's tf.data.Dataset, as
        with tf.distribute's distribute_datasets_from_function; returned plain."""
        ctx = tf.distribute.InputContext(num_input_pipelines=self.size,
                                         input_pipeline_id=self.rank,
                                         num_replicas_in_sync=self.size)
        dataset = dataset_fn(ctx)
        if not isinstance(dataset, tf.data.Dataset):
            raise UsageError(f"strategy.distribute_dataset: dataset_fn returned "
                             f"{type(dataset).__name__}; expected a tf.data.Dataset. Fix: "
                             f"return this input pipeline's dataset (ctx.input_pipeline_id)")
        _SHARDED_DATASETS.add(dataset)
        return dataset

    def callbacks(self, *chief_only, checkpoint=None, warmup_epochs=0.0, average_metrics=True,
                  broadcast=True, progress_bar=True):
        """Callbacks for model.fit, in the order they must run:
        broadcast of rank 0's model+optimizer state at train begin; averaging of epoch
        metrics (and of float non-trainable state such as BatchNorm statistics) over
        ranks; learning-rate warmup from lr/size to lr; then chief-only side effects:
        the progress bar, keras.callbacks.ModelCheckpoint(checkpoint) and `chief_only`."""
        from horovod_train import keras_callbacks as kc
        out = []
        if broadcast:
            out.append(kc.BroadcastInitialState(self))
        if average_metrics:
            out.append(kc.MetricAverage(self))
        if warmup_epochs:
            out.append(kc.LearningRateWarmup(self, warmup_epochs))
        if progress_bar:
            out.append(kc.ChiefProgbar(self.is_chief))
        if self.is_chief:
            if checkpoint:
                out.append(keras.callbacks.ModelCheckpoint(checkpoint))
            out.extend(chief_only)
        return out

    def metric_average(self):
        """For model.evaluate on sharded data: averages the returned metrics over ranks."""
        from horovod_train.keras_callbacks import MetricAverage
        return MetricAverage(self)

    # ---- small collectives for scripts (eager; every rank must call them) ----------
    def allreduce_mean(self, value):
        return self.backend.allreduce_mean(tf.convert_to_tensor(value))

    def gather(self, row) -> np.ndarray:
        """Every rank's row of floats as a [size, len(row)] array, on every rank."""
        from horovod_train import metrics
        return metrics.gather_rows(self.backend, [float(v) for v in row])

    def weight_digests(self, model) -> list:
        """sha256 of every rank's model weights, gathered on every rank."""
        from horovod_train import metrics
        return metrics.gather_digests(self.backend, metrics.weight_digest(model.weights))

    def barrier(self):
        self.backend.barrier()


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


# ---- in-graph mean over ranks ------------------------------------------------------
def _graph_reducer(backend):
    """grads -> their mean over ranks, inside the compiled train step."""
    if backend.info.size == 1:
        return list
    if backend.name == "mwms":
        return _MwmsMean(backend)
    return backend.allreduce_gradients  # horovod: one grouped allreduce (+compression)


class _MwmsMean:
    """CollectiveReduceV2 on the collective runtime MWMS configured, outside strategy.run.

    One op per dtype over the flattened gradients. Instance keys come from the dtype
    and size alone: every rank derives the same key in every trace (a retrace for a
    last partial batch included), and no two collectives in flight share one."""

    def __init__(self, backend):
        self.size = backend.info.size
        self.hint = {"ring": "ring", "nccl": "nccl"}.get(backend.collective, "auto")
        self.timeout = float(backend.timeout_s)
        self.wire = {"fp16": tf.float16, "bf16": tf.bfloat16}.get(backend.compression)

    def __call__(self, grads):
        grads = list(grads)
        out = [None] * len(grads)
        by_dtype = {}
        for i, g in enumerate(grads):
            by_dtype.setdefault(g.dtype, []).append(i)
        previous = []
        for dtype, idx in sorted(by_dtype.items(), key=lambda kv: kv[0].name):
            flat = tf.concat([tf.reshape(grads[i], [-1]) for i in idx], 0)
            wire = self.wire if self.wire is not None and dtype.is_floating else dtype
            with tf.control_dependencies(previous):  # one order on every rank
                reduced = tf.raw_ops.CollectiveReduceV2(
                    input=tf.cast(flat, wire), group_size=self.size, group_key=_MWMS_GROUP_KEY,
                    instance_key=self.instance_key(wire, flat.shape.num_elements()),
                    ordering_token=[], merge_op="Add", final_op="Div",
                    communication_hint=self.hint, timeout_seconds=self.timeout)
            previous = [reduced]
            parts = tf.split(tf.cast(reduced, dtype), [grads[i].shape.num_elements() for i in idx])
            for i, part in zip(idx, parts):
                out[i] = tf.reshape(part, tf.shape(grads[i]))
        return out

    @staticmethod
    def instance_key(dtype, count):
        return 1 + zlib.crc32(f"grads/{dtype.name}/{count}".encode()) % (2 ** 30)


# ---- the optimizer wrapper ---------------------------------------------------------
@keras.saving.register_keras_serializable(package="horovod_train")
class DistributedOptimizer(keras.optimizers.LossScaleOptimizer):
    """Allreduce, then (unscale, check finite, apply or skip on every rank).

    A LossScaleOptimizer subclass, so that compile() under mixed_float16 does not wrap
    it in Keras's own, which would decide finiteness on each rank's local gradients
    (ranks could disagree and hang). Without loss scaling the scale stays 1."""

    _ready = False  # set after __init__; guards against being wrapped (see below)

    def __init__(self, inner_optimizer, accum_steps=1, loss_scaling=False,
                 initial_scale=2.0 ** 15, dynamic_growth_steps=2000, name=None, **kwargs):
        super().__init__(inner_optimizer, initial_scale=initial_scale,
                         dynamic_growth_steps=dynamic_growth_steps,
                         name=name or "distributed_optimizer", **kwargs)
        self.accum_steps = int(accum_steps)
        self.loss_scaling = bool(loss_scaling)
        self._strategy = None  # bound by Strategy.distributed_optimizer, else the active one
        self._inject = None
        self.xla = None  # keras_jit.XlaParts, once fit compiles around the collectives
        self._ready = True

    def __setattr__(self, name, value):
        # keras.optimizers.LossScaleOptimizer(inner) sets inner.loss_scale_factor = None:
        # after our own construction, that assignment means we are being wrapped.
        if name == "loss_scale_factor" and self._ready:
            raise UsageError(
                "keras.optimizers.LossScaleOptimizer: received an htk DistributedOptimizer to "
                "wrap; expected the reverse. Keras's wrapper decides finiteness on each rank's "
                "local gradients, before the allreduce, so ranks could disagree and hang. Fix: "
                "strategy.distributed_optimizer(opt) does loss scaling itself under "
                "mixed_float16 (or pass it a LossScaleOptimizer to unwrap)")
        super().__setattr__(name, value)

    def _build_scale(self):
        if getattr(self, "dynamic_scale", None) is None:
            initial = self.initial_scale if self.loss_scaling else 1.0
            self.step_counter = self.add_variable((), "zeros", dtype="int", name="step_counter")
            self.dynamic_scale = self.add_variable(
                (), keras.initializers.Constant(initial), dtype="float32", name="dynamic_scale")
            self.skipped = self.add_variable((), "zeros", dtype="int", name="skipped_steps")

    def build(self, var_list):
        self._build_scale()
        if self.accum_steps > 1:
            self._accumulators = [self.add_variable_from_reference(v, name="accumulated_grad")
                                  for v in var_list]
        self.inner_optimizer.build(var_list)
        keras.optimizers.Optimizer.build(self, var_list)

    def scale_loss(self, loss):
        if not self.loss_scaling:
            return loss
        self._build_scale()
        return loss * tf.cast(self.dynamic_scale, loss.dtype)

    @property
    def skipped_steps(self) -> int:
        return int(self.skipped.numpy()) if getattr(self, "skipped", None) is not None else 0

    @property
    def strategy(self):
        strategy = self._strategy or _ACTIVE
        if strategy is None:
            raise UsageError("DistributedOptimizer: received no htk.Strategy in this process; "
                             "expected one to reduce over. Fix: create htk.Strategy() first, "
                             "then wrap with strategy.distributed_optimizer(opt)")
        return strategy

    def apply(self, grads, trainable_variables=None):
        reject_native_strategy("DistributedOptimizer.apply")
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        variables = list(trainable_variables)
        if not self.built:
            self.build(variables)
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        if self.xla is not None and self.xla.calls is not None:  # traced in XLA: apply later
            self.xla.calls.append((grads, variables))
            return
        grads = self._poisoned(grads)
        if self.accum_steps == 1:
            self._reduce_and_apply(grads, variables)
        else:
            self._accumulate(grads, variables)
        self._iterations.assign_add(1)

    def _poisoned(self, grads):
        """The test hook: one rank's gradients become inf on one apply call. Every rank
        builds the same ops (Horovod matches collectives by the names of their inputs);
        only the predicate differs."""
        if not self._inject:
            return grads
        hit = tf.logical_and(tf.equal(self._iterations + 1, self._inject[0]),
                             self._inject[1] == self.strategy.rank)
        return [None if g is None else g + tf.where(hit, tf.cast(np.inf, g.dtype),
                                                    tf.cast(0, g.dtype)) for g in grads]

    def _accumulate(self, grads, variables):
        for acc, g in zip(self._accumulators, grads):
            if g is not None:
                acc.assign_add(tf.cast(g, acc.dtype))

        def flush():
            mean = [acc.value / self.accum_steps for acc in self._accumulators]
            self._reduce_and_apply(mean, variables)
            for acc in self._accumulators:
                acc.assign(tf.zeros_like(acc.value))
            return tf.no_op()
        tf.cond(tf.equal((self._iterations + 1) % self.accum_steps, 0), flush, tf.no_op)

    def _reduce_and_apply(self, grads, variables):
        present = [i for i, g in enumerate(grads) if g is not None]
        reduced = self.strategy._reduce([grads[i] for i in present])
        grads = list(grads)
        for i, g in zip(present, reduced):
            grads[i] = g
        if self.xla is not None:  # after the collective, in an XLA function of its own
            self.xla.update(grads, variables)
        else:
            self.unscale_check_apply(grads, variables)

    def unscale_check_apply(self, grads, variables):
        inverse = 1.0 / self.dynamic_scale
        grads = [None if g is None else g * tf.cast(inverse, g.dtype) for g in grads]
        # Reduced values are identical on every rank, so is this verdict.
        finite = self.check_finite(grads)

        def apply():
            self.inner_optimizer.apply(grads, variables)
            grow = tf.logical_and(self.loss_scaling,
                                  self.step_counter + 1 >= self.dynamic_growth_steps)
            self.dynamic_scale.assign(tf.where(grow, self.dynamic_scale * 2.0, self.dynamic_scale))
            self.step_counter.assign(tf.where(grow, tf.zeros_like(self.step_counter),
                                              self.step_counter + 1))
            return tf.no_op()

        def skip():
            if self.loss_scaling:
                self.dynamic_scale.assign(tf.maximum(self.dynamic_scale * 0.5, 1.0))
            self.step_counter.assign(tf.zeros_like(self.step_counter))
            self.skipped.assign_add(tf.ones_like(self.skipped))
            return tf.no_op()
        tf.cond(finite, apply, skip)

    def get_config(self):
        config = super().get_config()
        config.update(accum_steps=self.accum_steps, loss_scaling=self.loss_scaling)
        return config
