"""The outer loop: build, broadcast, train epochs, log, evaluate, summarise.

Every decision that ends or shapes the loop (steps per epoch, when to log, when to
sample timings, when to evaluate) is a function of the config and the data size,
which every rank knows identically, so collectives always line up across ranks.
"""
import os
import time

import keras
from absl import logging

import models
from horovod_train import backends, checkpoint, env, metrics, observe, runtime, stopping, watchdog
from horovod_train import data as data_lib
from horovod_train.config import resolve_jit_compile
from horovod_train.data import pipeline, sharding
from horovod_train.errors import UsageError


class WarmupScaledRate(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from the per-replica rate to the world-size-scaled rate."""

    def __init__(self, base: float, scaled: float, warmup_steps: int):
        self.base, self.scaled, self.warmup_steps = base, scaled, warmup_steps

    def __call__(self, step):
        if self.warmup_steps <= 0:
            return keras.ops.convert_to_tensor(self.scaled, "float32")
        frac = keras.ops.minimum(keras.ops.cast(step, "float32") / self.warmup_steps, 1.0)
        return self.base + (self.scaled - self.base) * frac

    def value_at(self, step: int) -> float:
        """The rate at optimizer step `step`, in Python: reading it through the
        optimizer runs a dozen eager ops (~1 ms) per logging interval."""
        if self.warmup_steps <= 0:
            return self.scaled
        return self.base + (self.scaled - self.base) * min(step / self.warmup_steps, 1.0)

    def get_config(self):
        return {"base": self.base, "scaled": self.scaled, "warmup_steps": self.warmup_steps}


def lr_schedule(optim, world_size: int, steps_per_epoch: int) -> WarmupScaledRate:
    scaled = optim.learning_rate * (world_size if optim.scale_lr else 1)
    return WarmupScaledRate(optim.learning_rate, scaled, int(optim.warmup_epochs * steps_per_epoch))


def make_optimizer(optim, world_size: int, steps_per_epoch: int):
    schedule = lr_schedule(optim, world_size, steps_per_epoch)
    if optim.optimizer == "sgd":
        return keras.optimizers.SGD(schedule, momentum=optim.momentum)
    return keras.optimizers.Adam(schedule)


class TrainingDiverged(RuntimeError):
    """Gradients stayed non-finite for --max_nonfinite_steps consecutive steps."""


def step_batch(config) -> int:
    """Examples per rank per optimizer step: k micro-batches of --batch_size."""
    return config.data.batch_size * config.speed.grad_accum_steps


def _plan_steps(config, num_examples: int, world_size: int) -> tuple[int, int]:
    per_epoch = sharding.steps_per_epoch(num_examples, step_batch(config), world_size)
    if per_epoch == 0:
        k = config.speed.grad_accum_steps
        raise UsageError(
            f"--batch_size: received {config.data.batch_size} (x{k} accumulation); with "
            f"{world_size} ranks one optimizer step exceeds the {num_examples} training examples. "
            f"Fix: pass --batch_size={max(1, num_examples // (4 * world_size * k))} or fewer")
    total = per_epoch * config.train.epochs
    if config.train.max_steps:
        total = min(total, config.train.max_steps)
    return per_epoch, total


def _build(config, backend, data, steps_per_epoch):
    from horovod_train import precision
    precision.set_policy(config.speed.precision)
    with backend.scope():
        model = models.get_model(config.model, input_shape=data.input_shape,
                                 num_classes=data.num_classes,
                                 gradient_checkpointing=config.speed.gradient_checkpointing)
        optimizer = make_optimizer(config.optim, backend.info.size, steps_per_epoch)
        optimizer.build(model.trainable_variables)
    # Same start on every rank, explicitly: model AND optimizer state from rank 0.
    # Elastic runs do it in their first sync instead: a rank that joins later must not
    # call a collective the running ranks are not calling.
    if not config.runtime.elastic:
        backend.broadcast_variables(list(model.variables) + list(optimizer.variables))
    return model, optimizer


# The sampled split step costs a few ms more than a fused one (three calls, two host
# syncs); taking it at most once per this many steps keeps it near 1% of step time on
# a 10 ms step. The first two intervals are always sampled (the first one traces).
SPLIT_SAMPLE_STEPS = 100


def sample_split(step: int, log_every: int) -> bool:
    """Whether `step` (1-based) runs as the timed split step: the last step of an
    interval, in the first two intervals and then every ~SPLIT_SAMPLE_STEPS steps."""
    if step % log_every:
        return False
    interval = step // log_every
    every = -(-SPLIT_SAMPLE_STEPS // log_every)  # intervals between samples
    return interval <= 2 or interval % every == 0


class _Trainer:
    """Holds the per-run state of the epoch loop so its helpers stay short."""

    def __init__(self, config, backend, data, model, optimizer, per_epoch, total,
                 observer=None, jit_compile=False):
        from horovod_train.step import StepOptions, TrainStep
        self.config, self.backend, self.data = config, backend, data
        self.observer = observer or observe.NullObserver()
        self.instrument = config.observe.instrument
        self.lr = lr_schedule(config.optim, backend.info.size, per_epoch)  # for the records
        self.gpu = None
        if self.instrument:  # every rank samples its own GPU; the chief gets the mean
            from horovod_train.observe.nvml import GpuSampler
            self.gpu = GpuSampler(backend.info.local_rank)
        self.model, self.per_epoch, self.total = model, per_epoch, total
        speed = config.speed
        self.step = TrainStep(model, optimizer, backend, StepOptions(
            accum_steps=speed.grad_accum_steps, loss_scaling=speed.precision == "mixed_float16",
            inject_nonfinite=speed.injection(), jit_compile=jit_compile))
        self.skipped_steps = 0
        self.nonfinite_run = 0  # consecutive skipped steps
        # What the step's graph holds (TrainStep.graph_facts), read at the first step.
        self.graph_facts = dict.fromkeys(("collective_ops_per_step", "collective_ops_in_xla",
                                          "xla_compiled_functions"))
        self.global_step = 0
        self.loss_history = []  # (step, loss averaged over ranks) per interval
        self.accuracy_history = []
        self.eval_loss_history = []
        self.train_seconds = 0.0  # excluding the first (tracing) step
        self.train_samples = 0
        self.meter = metrics.IntervalMeter()
        self.last_parts = None  # shares of the latest sampled step, reused until the next
        self.timed_calls = 0
        # Bounds every wait on peers once training runs (see watchdog.py); started by run().
        self.watchdog = watchdog.StepWatchdog(config.runtime.collective_timeout_s,
                                              backend.info.rank)
        # SIGTERM becomes a stop vote carried by the next step (stopping.py).
        self.sigterm = stopping.SigtermVote(config.runtime.stop_grace_s, backend.info.rank)
        self.stop_agreed = False
        self.already_complete = False  # restored at (or past) the last step

    def _batches(self, epochs: int, start_step: int = 0):
        """One iterator over every epoch's shard, concatenated.

        A new iterator per epoch costs tf.data's set-up (graph rewrites) each time, up
        to seconds when ranks share cores, and every other rank waits for the slowest
        at the first allreduce; one iterator pays it once."""
        cfg = self.config
        # The order is a pure function of (seed, epoch): resuming at step s means
        # starting epoch s // per_epoch and skipping the batches already trained on.
        first_epoch, offset = divmod(start_step, self.per_epoch)

        def all_epochs(shard):
            per_epoch = [self.data.train_dataset(shard, step_batch(cfg), cfg.runtime.seed,
                                                 epoch, cfg.data.data_threads)
                         .take(self.per_epoch) for epoch in range(first_epoch, epochs)]
            per_epoch[0] = per_epoch[0].skip(offset)
            return pipeline.across_epochs(per_epoch)

        return iter(self.backend.distribute_dataset(all_epochs))

    def _fetch(self, batch_iter):
        """The next batch eagerly, and the seconds that took (~1 ms of handover even
        with a batch ready, which the fused path avoids; see feed.py)."""
        start = time.perf_counter()
        x, y = next(batch_iter)
        return x, y, time.perf_counter() - start

    def _run(self, batch_iter, controls):
        """One step on the next batch: (loss, finite, stop, seconds waited for it, split)."""
        if self.instrument and self.backend.supports_split_step and \
                sample_split(self.global_step + 1, self.config.train.log_every):
            x, y, waited = self._fetch(batch_iter)
            loss, finite, stop, parts = self.step.timed(x, y, *controls)
            return loss, finite, stop, waited, parts
        if self.config.runtime.deterministic:  # op determinism refuses feed.py's clock
            x, y, waited = self._fetch(batch_iter)
            return (*self.backend.run_step(self.step.fused, x, y, *controls), waited, None)
        # The batch is fetched inside the compiled step (feed.py).
        outputs, waited = self.backend.run_step_fed(self.step.fused, batch_iter, *controls)
        return (*outputs, waited, None)

    def _one_step(self, batch_iter):
        self.observer.before_step(self.global_step + 1)
        controls = (self.step.poison(self.global_step + 1, self.backend.info.rank),
                    self.step.stop_vote(self.sigterm.requested))
        t0 = time.perf_counter()
        loss, finite, stop, waited, parts = self._run(batch_iter, controls)
        loss, finite, waited = float(loss), float(finite), float(waited)
        self.stop_agreed = bool(stop)
        t2 = time.perf_counter()
        tracing_split = False
        if parts is not None:
            # The first timed call traces three functions: its split says nothing.
            if self.timed_calls > 0:
                self.last_parts = parts
            tracing_split = self.timed_calls == 0
            self.timed_calls += 1
        batch = step_batch(self.config)
        self.meter.add(batch, waited, t2 - t0 - waited, loss)
        # Steps that trace (the first fused one, the first split one) are set-up, not
        # throughput: the summary's samples/s leaves them out.
        if self.graph_facts["collective_ops_per_step"] is not None and not tracing_split:
            self.train_seconds += t2 - t0
            self.train_samples += batch
        else:  # this process's first step (traced): timed out, collectives counted
            self.graph_facts = self.step.graph_facts(*batch_iter.element_spec)
            # Inspecting the graph is set-up, not training: off the interval's clock.
            self.meter.excluded_s += time.perf_counter() - t2
        self.global_step += 1
        self.watchdog.beat(self.global_step)
        self.observer.after_step(self.global_step)
        self._check_finite(finite > 0.5)

    def _check_finite(self, finite: bool):
        """Every rank holds the same verdict (agreed in the step), so all stop together."""
        if finite:
            self.nonfinite_run = 0
            return
        self.skipped_steps += 1
        self.nonfinite_run += 1
        logging.warning("step %d: non-finite gradients; step skipped on every rank "
                        "(loss scale now %g)", self.global_step,
                        float(self.step.loss_scale.scale.numpy()))
        if self.nonfinite_run >= self.config.speed.max_nonfinite_steps:
            raise TrainingDiverged(
                f"training diverged: gradients were non-finite for {self.nonfinite_run} "
                f"consecutive steps (--max_nonfinite_steps) up to step {self.global_step}. "
                f"Fix: lower --learning_rate, use --precision=mixed_bfloat16 or fp32, or "
                f"add --warmup_epochs")

    def _log_interval(self):
        """Every rank: one gather of [loss, samples/s, GPU figures] per rank; the chief's
        observer prints and records the result, everyone else's does nothing."""
        from horovod_train.observe.nvml import combine
        m = self.meter
        gpu = self.gpu.sample() if self.gpu else [0.0, 0.0, 0.0]
        before = time.perf_counter()
        rows = metrics.gather_rows(self.backend, m.rank_row(before) + gpu)
        # The gather waits for the slowest rank (e.g. one still tracing): that wait is
        # this interval's, shown as "sync".
        now = time.perf_counter()
        m.sync_s = now - before
        self.meter = metrics.IntervalMeter(started=now)
        loss = float(rows[:, 0].mean())
        self.loss_history.append((self.global_step, loss))
        gpu_util, gpu_mem = combine(rows[:, 2:5].tolist())
        self.observer.interval({
            "step": self.global_step, "total_steps": self.total, "steps": m.steps,
            "loss": loss, "samples_per_sec": float(rows[:, 1].sum()),
            "samples_per_sec_per_rank": [float(r) for r in rows[:, 1]],
            # This rank's (the chief's) clocks; the split from the latest sampled step.
            "seconds_per_step": m.seconds_per_step(self.last_parts if self.instrument else None,
                                                   now),
            "sampled_split_s": self.last_parts if self.instrument else None,
            "learning_rate": self.lr.value_at(self.global_step - self.skipped_steps),
            "loss_scale": float(self.step.loss_scale.scale.numpy()),
            "gpu_util_pct": gpu_util, "gpu_mem_mib": gpu_mem})

    def _evaluate(self, label):
        from horovod_train.step import evaluate
        # Evaluation runs outside any strategy.run, on this rank's plain shard; the
        # counts are summed over ranks afterwards.
        started = time.perf_counter()
        info = self.backend.info
        ds = self.data.eval_dataset(sharding.ShardInfo(info.rank, info.size), 256)
        accuracy, loss, count = evaluate(self.model, ds, self.backend)
        self.accuracy_history.append((self.global_step, accuracy))
        self.eval_loss_history.append((self.global_step, loss))
        self.observer.evaluation(label, {"step": self.global_step, "accuracy": accuracy,
                                         "loss": loss, "count": count,
                                         "seconds": time.perf_counter() - started})
        # Evaluation and its report are not training time.
        self.meter.excluded_s += time.perf_counter() - started
        self.watchdog.beat(self.global_step)
        return accuracy

    def train(self, checkpointer):
        every = self.config.train.eval_every_epochs
        epochs = min(self.config.train.epochs, -(-self.total // self.per_epoch))
        self.global_step = checkpointer.restore()
        if self.config.train.eval_at_start:
            self._evaluate("start")
        if self.global_step >= self.total:
            self.already_complete = True
            logging.info("checkpoint | the run was already complete at step %d of %d; "
                         "nothing to train (the earlier summary is kept)", self.global_step,
                         self.total)
            return self._evaluate("final")
        batch_iter = self._batches(epochs, self.global_step)
        self.meter = metrics.IntervalMeter()  # the clock starts with the first step
        for epoch in range(self.global_step // self.per_epoch, epochs):
            while self.global_step < min((epoch + 1) * self.per_epoch, self.total):
                self._one_step(batch_iter)
                if self.global_step % self.config.train.log_every == 0 or \
                        self.global_step == self.total:
                    self._log_interval()
                checkpointer.maybe_save(self.global_step,
                                        last=self.global_step == self.total or self.stop_agreed)
                self.watchdog.beat(self.global_step)
                if self.stop_agreed:  # every rank: the vote came back in the same step
                    raise stopping.StopRequested(self.global_step, bool(checkpointer.directory))
            if self.global_step >= self.total:
                break
            if every and (epoch + 1) % every == 0:
                self._evaluate(f"epoch {epoch + 1}")
        return self._evaluate("final")


def _train(config, trainer, state, num_examples) -> tuple[float, dict]:
    """(final accuracy, extra summary facts): elastic, or with checkpoints."""
    if config.runtime.elastic:
        from horovod_train import elastic  # imports horovod: only when asked for
        return elastic.train(trainer, state, num_examples, config.runtime.elastic_commit_every)
    checkpointer = checkpoint.Checkpointer(
        config, trainer.backend, state, trainer.per_epoch,
        data_facts={"input_shape": list(trainer.data.input_shape),
                    "num_classes": trainer.data.num_classes})
    try:
        return trainer.train(checkpointer), {}
    finally:
        checkpointer.close()


def _summary(config, backend, trainer, accuracy, wall_start, backend_name):
    rate = trainer.train_samples / max(trainer.train_seconds, 1e-9)
    per_rank = [float(r[0]) for r in metrics.gather_rows(backend, [rate])]
    digests = metrics.gather_digests(backend, metrics.weight_digest(trainer.model.weights))
    return {
        "world_size": backend.info.size,
        "backend": backend_name,
        "model": config.model,
        "dataset": config.data.dataset,
        "global_batch": step_batch(config) * backend.info.size,
        "precision": config.speed.precision,
        "grad_accum_steps": config.speed.grad_accum_steps,
        "compression": config.speed.compression,
        "skipped_steps": trainer.skipped_steps,
        "loss_scale": float(trainer.step.loss_scale.scale.numpy()),
        "jit_compile": trainer.step.options.jit_compile,
        **trainer.graph_facts,
        "wire_bytes_per_step": backend.wire_bytes_per_step,
        "steps": trainer.global_step,
        "epochs": trainer.global_step / trainer.per_epoch,
        "final_loss": trainer.loss_history[-1][1] if trainer.loss_history else None,
        "loss_history": trainer.loss_history,
        "test_accuracy": accuracy,
        "accuracy_history": trainer.accuracy_history,
        "test_loss": trainer.eval_loss_history[-1][1],
        "eval_loss_history": trainer.eval_loss_history,
        "samples_per_sec": sum(per_rank),
        "samples_per_sec_per_rank": per_rank,
        "weight_digests": digests,
        "wall_seconds": time.perf_counter() - wall_start,
        "config": config.to_dict(),
    }


def _earlier_summary(path: str | None, now: dict) -> dict:
    """A relaunch of a finished run trains nothing: its own loss and throughput would be
    null and 0. Keep the earlier run's summary (marked), or say plainly there is none."""
    import json
    try:
        with open(path) as f:
            earlier = json.load(f)
    except (TypeError, OSError, ValueError):
        earlier = None
    if not isinstance(earlier, dict):
        earlier = dict(now, final_loss=None, samples_per_sec=None, samples_per_sec_per_rank=None)
    return dict(earlier, already_complete=True, test_accuracy=now["test_accuracy"])


def _timeline_path(config, launch) -> str | None:
    """run_dir/timeline.json when --horovod_timeline; Horovod opens it inside hvd.init(), so
    the launcher's rank 0 (Horovod's coordinator, which alone writes it) makes the
    directory first."""
    if not config.observe.horovod_timeline:
        return None
    if launch.rank == 0:
        os.makedirs(config.observe.run_dir, exist_ok=True)
    return os.path.join(config.observe.run_dir, "timeline.json")


def run(config) -> dict:
    """Trains per `config` on this process's rank; returns the run summary."""
    wall_start = time.perf_counter()
    launch = env.launch_info()
    backend_name = backends.resolve(config.runtime.backend, launch, os.environ)
    rt = config.runtime
    backend = backends.create(backend_name, collective=rt.collective,  # UsageError: before TF runs
                              collective_timeout_s=rt.collective_timeout_s,
                              port_base=rt.mwms_port_base, compression=config.speed.compression,
                              fusion_threshold_mb=rt.fusion_threshold_mb or None,
                              cycle_time_ms=rt.cycle_time_ms or None,
                              hierarchical_allreduce=rt.hierarchical_allreduce,
                              timeline_path=_timeline_path(config, launch))
    intra, inter = runtime.configure_threads(config.runtime, launch.local_size)
    info = backend.setup()
    runtime.quiet_non_chief(info.is_chief)
    runtime.configure_determinism(config.runtime)
    # After setup(), which pinned this rank's GPU: the devices it will train on.
    jit = resolve_jit_compile(config.speed.jit_compile, runtime.visible_gpus(),
                              config.runtime.deterministic)
    logging.info("config | backend %s | ranks %d (local %d) | threads intra %d inter %d | "
                 "jit_compile %s | %s", backend_name, info.size, info.local_size, intra, inter,
                 jit, config.to_dict())
    if getattr(backend, "chosen_env", None):
        logging.info("config | CPU-sharing defaults chosen (override by setting them): %s",
                     backend.chosen_env)
    if config.observe.horovod_timeline and not getattr(backend, "timeline_path", None):
        logging.warning("timeline | --horovod_timeline is Horovod's own; backend %s writes none",
                        backend_name)
    data = data_lib.load(config.data)
    per_epoch, total = _plan_steps(config, data.num_train_examples, info.size)
    model, optimizer = _build(config, backend, data, per_epoch)
    observer = observe.create(config, info.is_chief, info.size, total, {
        "world_size": info.size, "backend": backend_name, "model": config.model,
        "dataset": config.data.dataset, "global_batch": step_batch(config) * info.size,
        "total_steps": total, "steps_per_epoch": per_epoch,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    trainer = _Trainer(config, backend, data, model, optimizer, per_epoch, total, observer,
                       jit_compile=jit)
    state = checkpoint.training_state(model, optimizer, trainer.step.loss_scale)
    trainer.watchdog.start()
    trainer.sigterm.install()
    try:
        accuracy, facts = _train(config, trainer, state, data.num_train_examples)
    finally:
        trainer.sigterm.uninstall()
    summary = dict(_summary(config, backend, trainer, accuracy, wall_start, backend_name), **facts)
    trainer.watchdog.stop()
    info = backend.info  # an elastic ring may have re-formed with another chief
    if trainer.already_complete:
        summary = _earlier_summary(config.summary_path(), summary)
    observer.close(summary)
    if info.is_chief and config.summary_path():
        metrics.write_json_atomic(config.summary_path(), summary)
    if info.is_chief and config.export_weights:
        metrics.write_npz_atomic(config.export_weights, model.weights)
    if not trainer.already_complete:
        logging.info("done  | steps %d | loss %s | test accuracy %.4f | %.0f samples/s | %.1f s",
                     summary["steps"], summary["final_loss"], accuracy,
                     summary["samples_per_sec"], summary["wall_seconds"])
    backend.barrier()
    return summary
