"""htk.Strategy: joins the data-parallel job and hands out what a Keras script needs."""
import contextlib
import inspect
import types

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import backends, env, runtime
from horovod_train.errors import UsageError
from horovod_train.keras import callbacks as kc
from horovod_train.keras import sharding, state
from horovod_train.keras.guards import reject_native_strategy
from horovod_train.keras.optimizer import DistributedOptimizer, unwrap_optimizer


class Strategy:
    """Joins the data-parallel job and hands out the pieces a Keras script needs.

    One job per process (htk.state): the first Strategy(...) joins it; a later one with
    the same options IS that strategy; one with other options raises, naming them."""

    def __new__(cls, backend="auto", intra_op_threads=0, inter_op_threads=0, **backend_options):
        launch = env.launch_info()
        name = backends.resolve(backend, launch)
        requested = {"backend": name, "intra_op_threads": intra_op_threads,
                     "inter_op_threads": inter_op_threads, **backend_options}
        current = state.active()
        if current is not None:
            if current.backend_name == name:  # the same class: its defaults apply
                requested = {**_defaults(type(current.backend)), **requested}
            call = _call_text(backend, intra_op_threads, inter_op_threads, backend_options)
            return state.joined(requested, call)
        self = super().__new__(cls)
        self._join(name, launch, requested, backend_options)
        state.activate(self)
        return self

    def __init__(self, *args, **kwargs):
        """Everything happened in __new__, which may return the active strategy: a
        second call must not join again."""

    def _join(self, name, launch, requested, backend_options):
        self.backend_name = name
        self.backend = backends.create(name, **backend_options)
        self.options = {**_defaults(type(self.backend)), **requested}
        self.source_guards = {}  # divergence_guard.source_guard's: the tape loops' guards
        threads = types.SimpleNamespace(intra_op_threads=requested["intra_op_threads"],
                                        inter_op_threads=requested["inter_op_threads"])
        runtime.choose_cpu_allocator()  # before TF runs an op, as threads are
        self.threads = runtime.configure_threads(threads, launch.local_size)
        self.cpus = runtime.bind_cpus(launch)  # before the backend starts its threads
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
        runtime.quiet_non_chief(self.is_chief)
        if self.is_chief:
            logging.info("htk | backend %s | ranks %d (local %d) | threads intra %d inter %d, %s",
                         name, self.size, self.info.local_size, *self.threads, self.cpus)

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

        No tf.distribute scope on any backend: Keras stays undistributed and the
        optimizer wrapper reduces."""
        reject_native_strategy("strategy.scope()")
        yield self

    def distributed_optimizer(self, optimizer, accum_steps=1, loss_scale="auto",
                              initial_scale=2.0 ** 15, dynamic_growth_steps=2000,
                              inject_nonfinite=None, shard_optimizer_state=False):
        """A Keras 3 optimizer that averages gradients over ranks before applying them.

        accum_steps=k: k calls (micro-batches) accumulate locally, then one allreduce
        and one update. loss_scale: "auto" (dynamic when the global policy is
        mixed_float16), True/"dynamic" or False. A keras LossScaleOptimizer passed in is
        unwrapped: its scaling moves around the reduction. inject_nonfinite=(call, rank)
        is a test hook: that rank's gradients are inf on that apply call (1-based).
        shard_optimizer_state=True: each rank keeps the optimizer's state for 1/N of the
        parameters (the trainer's --shard_optimizer_state; Horovod backend)."""
        optimizer, loss_scale, initial_scale, dynamic_growth_steps = unwrap_optimizer(
            optimizer, accum_steps, loss_scale, initial_scale, dynamic_growth_steps)
        opt = DistributedOptimizer(optimizer, accum_steps=accum_steps, loss_scaling=loss_scale,
                                   initial_scale=initial_scale,
                                   dynamic_growth_steps=dynamic_growth_steps,
                                   shard_optimizer_state=shard_optimizer_state)
        opt._strategy = self
        opt._inject = tuple(int(v) for v in inject_nonfinite) if inject_nonfinite else None
        return opt

    def shard(self, data):
        """This rank's share: a tf.data.Dataset (element-wise, equal counts when the
        size is known) or numpy arrays (an array, or a tuple/list/dict of them)."""
        return sharding.shard(data, self.rank, self.size)

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
        return sharding.mark_sharded(dataset)

    def callbacks(self, *chief_only, checkpoint=None, warmup_epochs=0.0, average_metrics=True,
                  broadcast=True, progress_bar=True):
        """Callbacks for model.fit, in the order they must run:
        broadcast of rank 0's model+optimizer state at train begin; averaging of epoch
        metrics (and of float non-trainable state such as BatchNorm statistics) over
        ranks; learning-rate warmup from lr/size to lr; then chief-only side effects:
        the progress bar, keras.callbacks.ModelCheckpoint(checkpoint) and `chief_only`."""
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
        return kc.MetricAverage(self)

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



def _defaults(backend_cls) -> dict:
    """The backend constructor's keyword defaults: Strategy() and Strategy(x=default)
    ask for the same job."""
    try:
        params = inspect.signature(backend_cls).parameters.values()
    except (TypeError, ValueError):
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in params if p.kind in kinds and p.default is not p.empty}


def _call_text(backend, intra_op_threads, inter_op_threads, backend_options) -> str:
    given = {"intra_op_threads": intra_op_threads, "inter_op_threads": inter_op_threads}
    args = [f"backend={backend!r}"] + [f"{k}={v!r}" for k, v in given.items() if v]
    args += [f"{k}={v!r}" for k, v in backend_options.items()]
    return f"htk.Strategy({', '.join(args)})"
