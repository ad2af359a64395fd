"""The ONE outer loop: restore, evaluate, train epochs, log, keep the state, stop.

`Trainer.train(keeper)` runs every run, plain or elastic. What differs is the *state
keeper*, the part that decides what outlives a step:

    keeper.saves_on_stop       True when a SIGTERM stop leaves a checkpoint behind
    keeper.run(attempt, pause) calls attempt() and returns its result; an elastic
                               keeper calls it again after every resize (pause() runs
                               before the ring re-forms)
    keeper.restore()           -> Position: where this attempt starts (and variables
                               restored and identical on every rank)
    keeper.after_step(position, last)   saves or commits; may raise to re-form a ring
    keeper.facts()             extra facts for the run summary
    keeper.close()             releases what the keeper holds

CheckpointKeeper (trainer_types.py) keeps state on disk (checkpoint.Checkpointer);
the elastic keeper (elastic.py) commits it to memory. Every attempt re-places the loop
on the current world size's grid (`_place`), so a resized ring, or a checkpoint written
by another number of ranks (resume.py), resumes mid-epoch.

Every decision that ends or shapes the loop (steps per epoch, when to log, when to
sample timings, when to evaluate, when to compare the ranks' weights: divergence.py) is
a function of the config, the data size and the position, which every rank knows
identically, so collectives always line up.
"""
import dataclasses
import time

from absl import logging

from horovod_train import divergence, evaluation, metrics, observe, stopping, watchdog
from horovod_train.startup import StartupClock
from horovod_train.config import injected_delay
from horovod_train.checkpoint import training_state
from horovod_train.data import pipeline, rest
from horovod_train.trainer_types import Position, RunRecord


class TrainingDiverged(RuntimeError):
    """Gradients stayed non-finite for --max_nonfinite_steps consecutive steps."""


class Trainer:
    """The per-run state of the loop, and the loop (train)."""

    def __init__(self, options, backend, data, model, optimizer, grid, observer=None,
                 learning_rate=None, startup=None, shards=None):
        from horovod_train.step import StepOptions, TrainStep
        self.options, self.backend, self.data = options, backend, data  # TrainerOptions
        self.observer = observer or observe.NullObserver()
        self.instrument = options.instrument
        self.lr = learning_rate  # the schedule (value_at(step)), for the records
        self.gpu = None
        if self.instrument:  # every rank samples its own GPU; the chief gets the mean
            from horovod_train.observe.nvml import sampler_for
            self.gpu = sampler_for(backend.info.local_rank)
        # The grid at the current world size (grid.py); total: this attempt's last step.
        self.model, self.grid, self.total = model, grid, grid.total
        self.step = TrainStep(model, optimizer, backend, StepOptions(
            accum_steps=options.accum_steps, loss_scaling=options.loss_scaling,
            inject_nonfinite=options.inject_nonfinite, jit_compile=options.jit_compile),
            shards=shards)
        self.skipped_steps = 0
        self.nonfinite_run = 0  # consecutive skipped steps
        # What the step's graph holds (TrainStep.graph_facts), read at the first step.
        self.graph_facts = dict.fromkeys(("collective_ops_per_step", "collective_ops_in_xla",
                                          "xla_compiled_functions"))
        self.global_step = 0
        self.position = Position()
        self.loss_history = []  # (step, loss averaged over ranks) per interval
        self.accuracy_history = []
        self.eval_loss_history = []
        self.throughput = metrics.Throughput()  # this rank's, over the logged intervals
        self.meter = metrics.IntervalMeter()
        self.last_parts = None  # shares of the latest sampled step, reused until the next
        self._step_paths = set()  # how steps have been run (_run): a first call compiles
        # Bounds every wait on peers once training runs (see watchdog.py); started by run().
        self.watchdog = watchdog.StepWatchdog(options.collective_timeout_s,
                                              backend.info.rank, size=backend.info.size)
        # SIGTERM becomes a stop vote carried by the next step (stopping.py).
        self.sigterm = stopping.SigtermVote(options.stop_grace_s, backend.info.rank)
        self.stop_agreed = False
        self.already_complete = False  # restored at (or past) the last step
        self.divergence_checks = 0  # cross-rank weight comparisons made (divergence.py)
        self.startup = startup or StartupClock()  # the phases up to the first step's end

    # -- the loop -------------------------------------------------------------------

    def train(self, keeper) -> RunRecord:
        """Trains to the end under `keeper`; returns the run's record. Raises
        StopRequested when the ranks agreed to stop on a SIGTERM."""
        self.sigterm.install()
        try:
            # Re-forming an elastic ring is not a stalled peer: the watchdog re-arms at
            # the next step.
            accuracy = keeper.run(lambda: self._attempt(keeper), self.watchdog.disarm)
        finally:
            self.sigterm.uninstall()
        tally = self.throughput
        return RunRecord(
            test_accuracy=accuracy, steps=self.global_step, per_epoch=self.grid.per_epoch,
            loss_history=list(self.loss_history), accuracy_history=list(self.accuracy_history),
            eval_loss_history=list(self.eval_loss_history), skipped_steps=self.skipped_steps,
            loss_scale=float(self.step.loss_scale.scale.numpy()),
            graph_facts=dict(self.graph_facts), divergence_checks=self.divergence_checks,
            first_step_after_s=self.startup.ends.get("first_step"),
            startup_row=self.startup.row(), samples_per_sec=tally.rate(),
            cpu_s=tally.cpu_s, samples=tally.samples, already_complete=self.already_complete)

    def training_state(self) -> list:
        """Every variable a resumed run needs (checkpoint.training_state)."""
        return training_state(self.model, self.step.optimizer, self.step.loss_scale,
                              self.step.shards)

    def _attempt(self, keeper) -> float:
        """From the keeper's position to the end (or to a resize, which raises)."""
        start = keeper.restore()
        in_epoch = self._place(start)
        if self.options.eval_at_start and start.launch_start:
            self._evaluate("start")
        if self.global_step >= self.total:
            if start.launch_start:
                self.already_complete = True
                logging.info("checkpoint | the run was already complete at step %d of %d; "
                             "nothing to train (the earlier summary is kept)",
                             self.global_step, self.total)
            return self._evaluate("final")
        with self._epoch_batches(in_epoch) as stream:
            self.meter = metrics.IntervalMeter()  # the clock starts with the first step
            while self.global_step < self.total:
                epoch_done = self._train_one(stream.current, keeper)
                if epoch_done:
                    stream.advance()
                every = self.options.eval_every_epochs
                if epoch_done and self.global_step < self.total and every and \
                        self.position.epoch % every == 0:
                    self._evaluate(f"epoch {self.position.epoch}")
        return self._evaluate("final")

    def _train_one(self, batch_iter, keeper) -> bool:
        """One step on `batch_iter` (the current epoch's batches), its log interval, the
        keeper's turn and the stop vote; returns whether the step ended an epoch."""
        self._one_step(batch_iter)
        epoch_done = self._advance()
        if self.global_step % self.options.log_every == 0 or \
                self.global_step == self.total:
            self._log_interval()
        # Before the keeper's turn: weights that differ across ranks are never saved.
        self._check_divergence(epoch_done)
        if self.stop_agreed and not keeper.saves_on_stop:
            # Nothing outlives this process (no --checkpoint_dir, or in-memory commits):
            # every rank stops here, at the step the vote came back.
            raise stopping.StopRequested(self.global_step, saved=False)
        with self.watchdog.where.entering("the checkpoint write's rounds", self.global_step):
            keeper.after_step(self.position,
                              last=self.global_step == self.total or self.stop_agreed)
        self.watchdog.beat(self.global_step)
        if self.stop_agreed:  # every rank: the vote came back in the same step
            raise stopping.StopRequested(self.global_step, saved=True)
        return epoch_done

    def _place(self, start: Position) -> int:
        """Points the loop at the current world size's grid: steps per epoch, the last
        step, the position. Returns the steps of the current epoch already done."""
        if self.backend.info.size != self.grid.world_size:  # a re-formed elastic ring
            self.grid = self.grid.resized(self.backend.info.size)
        placed = self.grid.place(start.epoch, start.epoch_examples, start.layouts,
                                 rest.can_replay(self.data))
        note = placed.note(self.grid, start.epoch_examples)
        if note:
            logging.info("checkpoint | %s", note)
        self.total = self.grid.last_step(start.step, placed.epoch, placed.in_epoch)
        self.global_step = start.step
        self.position = Position(start.step, placed.epoch, placed.examples,
                                 layouts=placed.earlier)
        return placed.in_epoch

    def _advance(self) -> bool:
        """Moves the position one step on; returns whether that ended an epoch."""
        p = self.position
        examples = p.epoch_examples + self.grid.examples_per_step
        done = self.grid.ended(examples)
        self.position = Position(self.global_step, p.epoch + done, 0 if done else examples,
                                 layouts=() if done else p.layouts)
        return done

    def _epoch_batches(self, in_epoch: int):
        """This rank's batches from the position to the last step (no further epochs),
        as a pipeline.EpochStream."""
        opts, epoch, grid = self.options, self.position.epoch, self.grid
        epochs = min(grid.epochs,
                     epoch + -(-(in_epoch + self.total - self.global_step) // grid.per_epoch))
        # An epoch begun in other layouts: its records trained there (data/layouts.py).
        trained = rest.trained_mask(self.data, self.position.layouts, opts.seed, epoch) \
            if self.position.layouts else None
        return pipeline.epoch_batches(
            self.data, self.backend, batch_size=grid.step_batch, seed=opts.seed,
            threads=opts.data_threads, per_epoch=grid.per_epoch, epochs=epochs,
            start_step=epoch * grid.per_epoch + in_epoch, trained=trained)

    # -- one step ---------------------------------------------------------------------

    def _fetch(self, batch_iter):
        """The next batch eagerly, and the seconds that took (~1 ms of handover even
        with a batch ready, which the fused path avoids; see feed.py)."""
        start = time.perf_counter()
        x, y = next(batch_iter)
        return x, y, time.perf_counter() - start

    def _run(self, batch_iter, controls):
        """One step on the next batch: (loss, finite, stop, seconds waited for it, split,
        which of the three ways it ran)."""
        if self.instrument and \
                metrics.sample_split(self.global_step + 1, self.options.log_every):
            x, y, waited = self._fetch(batch_iter)
            loss, finite, stop, parts = self.step.timed(x, y, *controls)
            return loss, finite, stop, waited, parts, "split"
        if self.options.deterministic:  # op determinism refuses feed.py's clock
            x, y, waited = self._fetch(batch_iter)
            return (*self.backend.run_step(self.step.fused, x, y, *controls), waited, None,
                    "fetched")
        # The batch is fetched inside the compiled step (feed.py).
        outputs, waited = self.backend.run_step_fed(self.step.fused, batch_iter, *controls)
        return (*outputs, waited, None, "fed")

    def _traced(self, path: str, traces_before: int) -> bool:
        """Whether the step just run traced or compiled: the first step run this way (the
        backend's fed wrapper is a function of its own), or any retrace of the step's
        functions (TrainStep.tracing_count)."""
        new_path = path not in self._step_paths
        self._step_paths.add(path)
        return new_path or self.step.tracing_count() > traces_before

    @property
    def communicates(self) -> bool:
        """Whether a step moves anything between ranks, from what was measured: more than
        one rank, and collectives in the step's graph. When not, the split's 'comm' is
        the cost of calling an identity and no part of the breakdown."""
        return self.backend.info.size > 1 and bool(self.graph_facts["collective_ops_per_step"])

    def _one_step(self, batch_iter):
        self.observer.before_step(self.global_step + 1)
        controls = (self.step.poison(self.global_step + 1, self.backend.info.rank),
                    self.step.stop_vote(self.sigterm.requested))
        traces = self.step.tracing_count()
        self.startup.mark("restore")  # the first call ends it; later ones change nothing
        delay = self._delay_s("step")  # fault injection: a straggler, a stalled rank
        if delay:  # not sleep(0): that yields the thread, a scheduler tick on a busy host
            time.sleep(delay)
        t0 = time.perf_counter()
        with self.watchdog.where.entering("the step's gradient allreduce", self.global_step + 1,
                                          self.backend.wire_bytes_per_step):
            loss, finite, stop, waited, parts, path = self._run(batch_iter, controls)
        loss, finite, waited = float(loss), float(finite), float(waited)
        self.stop_agreed = bool(stop)
        t2 = time.perf_counter()
        traced = self._traced(path, traces)
        self.meter.traced |= traced  # the interval's rate is set-up, not throughput
        if parts is not None and not traced:  # a split that traced says nothing
            self.last_parts = parts
        self.meter.add(self.grid.step_batch, waited, t2 - t0 - waited, loss)
        if self.graph_facts["collective_ops_per_step"] is None:
            # This process's first step: collectives counted (timed out, below).
            cpu = metrics.process_cpu_s()
            self.graph_facts = self.step.graph_facts(*batch_iter.element_spec)
            self.startup.mark("first_step")
            self.observer.startup(self.startup.seconds())
            # Inspecting the graph is set-up, not training: off the interval's clocks.
            self.meter.exclude(t2, cpu)
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
        if self.nonfinite_run >= self.options.max_nonfinite_steps:
            raise TrainingDiverged(
                f"training diverged: gradients were non-finite for {self.nonfinite_run} "
                f"consecutive steps (--max_nonfinite_steps) up to step {self.global_step}. "
                f"Fix: lower --learning_rate, use --precision=mixed_bfloat16 or fp32, or "
                f"add --warmup_epochs")

    def _divergence_point(self, epoch_done: bool) -> str | None:
        """Where this step's weights are compared across ranks, or None: epoch ends (the
        first, then those crossing divergence.MIN_STEPS_BETWEEN_EPOCH_CHECKS), every
        --divergence_check_steps steps, and the last step (a run cut short by
        --max_steps mid-epoch is checked too). A function of the position alone, the same
        on every rank, so every rank joins the same collectives."""
        every = self.options.divergence_check_steps
        if epoch_done and divergence.epoch_end_due(self.global_step, self.grid.per_epoch,
                                                   first=self.position.epoch == 1):
            return f"epoch {self.position.epoch} end"
        if every and self.global_step % every == 0:
            return f"step {self.global_step} (--divergence_check_steps={every})"
        if self.global_step == self.total:
            return "the last step"
        return None

    def _check_divergence(self, epoch_done: bool):
        """Raises divergence.RanksDiverged on every rank if any rank's trainable weights
        differ from rank 0's. Non-trainable state (BatchNorm statistics, from each rank's
        own batches) may differ by design and is left out."""
        where = self._divergence_point(epoch_done)
        if where is None:
            return
        started = time.perf_counter()
        try:
            with self.watchdog.where.entering("the ranks' weight check", self.global_step):
                rows = divergence.check(self.backend, self.model.trainable_variables,
                                        self.global_step, where)
        finally:  # the breakdown shows what the check costs ("divergence")
            self.meter.divergence_s += time.perf_counter() - started
        if rows is None:  # one rank: nothing to compare
            return
        # The first check traces the checksum and its gather (~0.2 s for digits_cnn, 20 of
        # its steps): like a step's tracing, set-up that the run does not pay again.
        self.meter.traced |= not self.divergence_checks
        self.meter.divergence_traced |= not self.divergence_checks
        if not self.divergence_checks:  # once, to show the guard is on; then silent
            every = self.options.divergence_check_steps
            logging.info("divergence | weights identical on %d ranks at %s (checked at epoch "
                         "ends%s)", len(rows), where, f" and every {every} steps" if every else "")
        self.divergence_checks += 1

    # -- records ----------------------------------------------------------------------

    def _log_interval(self):
        """Every rank: one gather of [loss, samples/s, GPU figures] per rank; the chief's
        observer prints and records the result, everyone else's does nothing."""
        from horovod_train.observe.nvml import combine
        m = self.meter
        gpu = self.gpu.sample() if self.gpu else [0.0, 0.0, 0.0]
        before = time.perf_counter()
        # The summary's tally takes the wall the gathered rate is computed from, before the
        # gather's own wait is known, so the report rebuilds exactly the same figure.
        self.throughput.add(m.samples, m.wall(before), m.traced, m.cpu())
        # Each rank's own work per step (no waits): the slowest is who the others wait for.
        own = metrics.own_seconds(m.seconds_per_step(self._parts(), before))
        with self.watchdog.where.entering("the interval's metrics gather", self.global_step):
            rows = metrics.gather_rows(self.backend, m.rank_row(before) + [own] + gpu)
        # The gather waits for the slowest rank (e.g. one still tracing): that wait is
        # this interval's, shown as "sync".
        now = time.perf_counter()
        m.sync_s = now - before
        self.meter = metrics.IntervalMeter(started=now)
        loss = float(rows[:, 0].mean())
        self.loss_history.append((self.global_step, loss))
        gpu_util, gpu_mem = combine(rows[:, 3:6].tolist())
        split = self._parts()
        waited, slowest = metrics.waits([float(r) for r in rows[:, 2]])
        self.observer.interval({
            "step": self.global_step, "total_steps": self.total, "steps": m.steps,
            "loss": loss, "samples_per_sec": float(rows[:, 1].sum()), "traced": m.traced,
            "divergence_traced": m.divergence_traced,
            "samples_per_sec_per_rank": [float(r) for r in rows[:, 1]],
            # Seconds a step each rank waited for the slowest (who: slowest_rank).
            "wait_s_per_rank": waited, "slowest_rank": slowest if len(rows) > 1 else None,
            # This rank's (the chief's) clocks; the split from the latest sampled step.
            "seconds_per_step": m.seconds_per_step(split, now), "sampled_split_s": split,
            "learning_rate": self.lr.value_at(self.global_step - self.skipped_steps),
            "loss_scale": float(self.step.loss_scale.scale.numpy()),
            "gpu_util_pct": gpu_util, "gpu_mem_mib": gpu_mem})

    def _parts(self) -> dict | None:
        """The latest sampled split, without comm where nothing is communicated."""
        split = self.last_parts if self.instrument else None
        if split and not self.communicates:
            split = {k: v for k, v in split.items() if k != "comm"}
        return split

    def _delay_s(self, phase: str) -> float:
        """Seconds --inject_delay adds to this rank's `phase` (tests)."""
        return injected_delay(self.options.inject_delay, phase, self.backend.info.rank)

    def _evaluate(self, label):
        started, cpu = time.perf_counter(), metrics.process_cpu_s()
        with self.watchdog.where.entering(f"the {label} evaluation's rounds", self.global_step):
            accuracy, loss, count = evaluation.evaluate_shard(
                self.model, self.data, self.backend, label, batch_size=self.options.eval_batch,
                bound_s=self.options.collective_timeout_s,
                alive=self.watchdog.alive, delay_s=self._delay_s("eval"))
        self.accuracy_history.append((self.global_step, accuracy))
        self.eval_loss_history.append((self.global_step, loss))
        self.observer.evaluation(label, {"step": self.global_step, "accuracy": accuracy,
                                         "loss": loss, "count": count,
                                         "seconds": time.perf_counter() - started})
        # Evaluation and its report are not training time.
        self.meter.exclude(started, cpu)
        self.watchdog.beat(self.global_step)
        return accuracy

