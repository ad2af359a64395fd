"""Builds a run and hands it to the one loop: backend, data, model, optimizer, the
state keeper, the summary (from the Trainer's RunRecord). The loop itself is trainer.Trainer.

`run(config)` is the whole run of one rank. The step counts are a function of the
config and the data size, which every rank knows identically, so collectives always
line up across ranks.
"""
import dataclasses
import math
import os
import time

import numpy as np
from absl import logging

import models
from horovod_train import backends, checkpoint, console, env, filemode, metrics, observe, precision
from horovod_train import resume, rounds, runtime, schedules, stacks, startup, watchdog
from horovod_train import write_bound
from horovod_train.checkpoint_fingerprint import written_by
from horovod_train import data as data_lib
from horovod_train.config import resolve_jit_compile
from horovod_train.data.layouts import Layout, from_record as layouts_from_record
from horovod_train.errors import UsageError
from horovod_train.grid import EpochGrid, epoch_grid, step_batch
from horovod_train.trainer import Trainer
from horovod_train.trainer_types import CheckpointKeeper, RunRecord, TrainerOptions
from launch import private_files


def _plan_grid(config, num_examples: int, world_size: int) -> EpochGrid:
    grid = epoch_grid(num_examples, step_batch(config), world_size, config.train.epochs,
                      config.train.max_steps)
    if grid.per_epoch == 0:
        k = config.speed.grad_accum_steps
        raise UsageError(
            f"--batch_size: received {config.data.batch_size} (x{k} accumulation); with "
            f"{world_size} ranks one optimizer step exceeds the {num_examples} training examples. "
            f"Fix: pass --batch_size={max(1, num_examples // (4 * world_size * k))} or fewer")
    return grid


def _build(config, backend, data, schedule):
    """(model, optimizer, optimizer_shards.OptimizerShards or None)."""
    precision.set_policy(config.speed.precision)
    model = _model_for(config, data)
    optimizer = schedules.make_optimizer(config.optim, schedule)
    shards = None
    if config.speed.shard_optimizer_state:
        from horovod_train.optimizer_shards import OptimizerShards
        shards = OptimizerShards(model.trainable_variables, optimizer, backend,
                                 backend.bucket_bytes)
        shared = shards.shared  # each rank's slots are its own (zeros at the start)
        logging.info("config | %s", shards.describe())
    else:
        optimizer.build(model.trainable_variables)
        shared = optimizer.variables
    # Same start on every rank, explicitly: model AND optimizer state from rank 0.
    # Elastic runs do it in their first sync instead: a rank that joins later must not
    # call a collective the running ranks are not calling.
    if not config.runtime.elastic:
        backend.broadcast_variables(list(model.variables) + list(shared))
    return model, optimizer, shards


def _model_for(config, data):
    try:
        return models.get_model(config.model, input_shape=data.input_shape,
                                num_classes=data.num_classes,
                                gradient_checkpointing=config.speed.gradient_checkpointing)
    except ValueError as err:
        # Keras's input check: the model's first layer cannot take these examples (an image
        # model on token sequences). Every rank builds the same, so every rank exits 2.
        if "incompatible with the layer" not in str(err):
            raise
        raise UsageError(
            f"--model: received {config.model!r}, which cannot take --dataset "
            f"{config.data.dataset}'s examples of shape {tuple(data.input_shape)} ({err}); "
            f"expected a model built for that input. Fix: pass a --model whose input matches "
            f"(python scripts/model_table.py lists each model's input)") from None


def _keeper(config, backend, data, state, grid, resumed, heartbeat=None, shards=None):
    """The state keeper: elastic in-memory commits, or the checkpointer (`heartbeat`
    after each round of the chief's write: write_bound.WriteBound, rounds.py). `resumed`:
    (resume.Resumption, the schedule), which the checkpoints record, and the newest
    checkpoint's meta (None: none), whose epoch layouts a restore continues."""
    if config.runtime.elastic:
        from horovod_train import elastic
        return elastic.keeper(backend, state, config.runtime.elastic_commit_every)
    resumption, schedule, meta = resumed
    checkpointer = checkpoint.Checkpointer(
        config, backend, state, grid.per_epoch,
        data_facts={"input_shape": list(data.input_shape), "num_classes": data.num_classes},
        heartbeat=heartbeat, change=resumption.change,
        schedule={"scale": resumption.lr_scale, "warmup_steps": schedule.warmup_steps},
        shards=shards)
    return CheckpointKeeper(checkpointer, grid,
                            _recorded_layouts(meta, config, backend.info.is_chief))


def _recorded_layouts(meta, config, is_chief: bool) -> tuple:
    """(step, the epoch's layouts) the newest checkpoint records (data/layouts.py); the
    chief alone warns of a field an older checkpoint lacks."""
    written = written_by(meta, config, chief=is_chief) if meta else None
    if written is None:
        return None, ()
    writer = Layout(written.world_size, written.batch_size * written.accum_steps, 0)
    return meta["step"], layouts_from_record(meta.get("position"), writer)


def _resumption(config, backend):
    """(config, resume.Resumption, the checkpoint's meta or None): how this launch
    continues the newest checkpoint, the accumulation in the config changed to keep its
    global batch. The chief reads the checkpoint's record and shares it, so every rank
    plans the same."""
    info, optim = backend.info, config.optim
    launch = resume.Launch(info.size, config.data.batch_size, config.speed.grad_accum_steps,
                           schedules.lr_scale(optim, info.size),
                           config.train.allow_global_batch_change)
    if not config.train.checkpoint_dir or config.runtime.elastic:
        return config, resume.fresh(launch), None
    meta = checkpoint.newest_meta(config.train.checkpoint_dir) if info.is_chief else None
    if info.size > 1:
        meta = backend.comm.broadcast_object(meta, 0)
    resumption = resume.plan(written_by(meta, config, chief=info.is_chief) if meta else None,
                             launch)
    speed = dataclasses.replace(config.speed, grad_accum_steps=resumption.accum_steps)
    return dataclasses.replace(config, speed=speed), resumption, meta


def _train(trainer, keeper) -> tuple[RunRecord, dict]:
    """(the run's record, the keeper's facts for the summary)."""
    try:
        return trainer.train(keeper), keeper.facts()
    finally:
        keeper.close()


def _summary(config, backend, model, jit, record: RunRecord, wall_start, where):
    """The run's summary; `where` (the watchdog's) around each gather: each that
    finishes restarts the watchdog's window (watchdog.py), still armed here."""
    with where.entering("the summary's gather", record.steps):
        rows = metrics.gather_rows(backend, [record.samples_per_sec or 0.0, record.cpu_s,
                                             record.samples, metrics.peak_rss_mb(),
                                             record.first_step_after_s or 0.0,
                                             *record.startup_row])
    per_rank = [float(r[0]) for r in rows]
    # A rank that trained no step (a finished run relaunched) reports 0: None instead.
    first_step = [float(r[4]) if r[4] else None for r in rows]
    phases = [startup.from_row(r[5:]) if r[4] else None for r in rows]
    cpu_s, samples = float(rows[:, 1].sum()), float(rows[:, 2].sum())
    digest = metrics.weight_digest(model.weights)
    with where.entering("the summary's weight digests", record.steps):
        digests = metrics.gather_digests(backend, digest)
    return {
        "world_size": backend.info.size,
        "backend": backend.name,
        "model": config.model,
        "dataset": config.data.dataset,
        "global_batch": step_batch(config) * backend.info.size,
        "precision": config.speed.precision,
        "grad_accum_steps": config.speed.grad_accum_steps,
        "compression": config.speed.compression,
        "skipped_steps": record.skipped_steps,
        "loss_scale": record.loss_scale,
        "jit_compile": jit,
        **record.graph_facts,
        "wire_bytes_per_step": backend.wire_bytes_per_step,
        "steps": record.steps,
        "epochs": record.steps / record.per_epoch,
        "final_loss": record.loss_history[-1][1] if record.loss_history else None,
        "loss_history": record.loss_history,
        "test_accuracy": record.test_accuracy,
        "accuracy_history": record.accuracy_history,
        "test_loss": record.eval_loss_history[-1][1],
        "eval_loss_history": record.eval_loss_history,
        "samples_per_sec": sum(per_rank),
        "samples_per_sec_per_rank": per_rank,
        # User + system CPU of every rank over the same intervals, per sample trained:
        # the cost that other processes' load on a shared host does not move.
        "cpu_seconds_per_sample": cpu_s / samples if samples else None,
        "weight_digests": digests,
        # Start-up cost per rank: seconds from the process's start to its first step's
        # end (imports, joining, the input pipeline, tracing), and peak memory.
        "first_step_after_s_per_rank": first_step,
        "startup_s_per_rank": phases,  # the same, by phase (startup.py)
        "peak_rss_mb_per_rank": [round(float(r[3]), 1) for r in rows],
        "divergence_checks": record.divergence_checks,  # cross-rank comparisons that passed
        "wall_seconds": time.perf_counter() - wall_start,
        "config": config.to_dict(),
    }


def _state_facts(backend, optimizer, shards, built_rss_mb: float) -> dict:
    """The optimizer state this rank holds, for the summary: sharded (optimizer_shards),
    or every slot of every parameter; and each rank's peak memory once the model and the
    optimizer were built, before any step's transients (every rank: a collective)."""
    built = [round(float(r[0]), 1) for r in metrics.gather_rows(backend, [built_rss_mb])]
    if shards is not None:
        return dict(shards.facts(), shard_optimizer_state=True, peak_rss_mb_built_per_rank=built)
    held = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize
               for v in optimizer.variables if len(v.shape))  # the slots, not the counters
    return {"shard_optimizer_state": False, "optimizer_state_bytes_per_rank": held,
            "peak_rss_mb_built_per_rank": built}


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
    path = os.path.join(config.observe.run_dir, "timeline.json")
    if launch.rank == 0:
        os.makedirs(config.observe.run_dir, exist_ok=True)
        try:  # Horovod's C++ opens it by name: made here first, a file of ours, not a link
            os.close(private_files.open_append(path, filemode.new_file_mode()))
        except private_files.Refused as err:
            logging.warning("timeline | %s; this run goes on without a timeline", err)
            return None  # only the coordinator (rank 0) writes one
    return path


def _setup(config, launch):
    """(backend joined, jit_compile): the backend from the config, this rank's threads,
    devices and logging, and the resolved config logged once."""
    name = backends.resolve(config.runtime.backend, launch, os.environ)
    # UsageError on a bad option: before TF runs.
    backend = backends.create_from_config(name, config, _timeline_path(config, launch))
    allocator = runtime.choose_cpu_allocator()
    intra, inter = runtime.configure_threads(config.runtime, launch.local_size)
    placed = runtime.bind_cpus(launch, config.runtime.elastic)  # before the backend's threads
    info = backend.setup()
    runtime.quiet_non_chief(info.is_chief)
    runtime.configure_determinism(config.runtime)
    # After setup(), which pinned this rank's GPU: the devices it will train on.
    jit = resolve_jit_compile(config.speed.jit_compile, runtime.visible_gpus(),
                              config.runtime.deterministic)
    logging.info("config | backend %s | ranks %d (local %d) | threads intra %d inter %d, %s | "
                 "jit_compile %s | %s", backend.describe(), info.size, info.local_size, intra,
                 inter, placed, jit, console.changed_options(config))
    chosen = {**allocator, **backend.chosen_env}
    if chosen:
        logging.info("config | CPU defaults chosen (override by setting them): %s",
                     " ".join(f"{k}={v}" for k, v in sorted(chosen.items())))
    if config.observe.horovod_timeline and not backend.timeline_path:
        logging.warning("timeline | --horovod_timeline is Horovod's own; backend %s writes none",
                        backend.name)
    return backend, jit


def _stack_dump(config, info, watchdog_):
    """This rank's stack files in RUN_DIR/stacks (stacks.py), dumped on request and, with
    the chief's summary, when the watchdog ends the rank; None without --run_dir."""
    if not config.observe.run_dir:
        return None
    dump = stacks.StackDump(os.path.join(config.observe.run_dir, stacks.DIR_NAME), info.rank,
                            watchdog_.where).install()
    watchdog_.before_exit = _stacks_report(dump, info, "the watchdog fired")
    return dump


def _stacks_report(dump, info, reason: str):
    """What runs before a rank ends on a stall: every rank's stacks (stacks.report)."""
    return lambda message: stacks.report(dump, info.size, info.is_chief, reason,
                                         watchdog.PEER_LOST_SETTLE_S)


def _write_bound(config, trainer, info, dump) -> write_bound.WriteBound:
    """After each round of a checkpoint write, on every rank: the watchdog's beat, a
    line while it runs long, and its bound (write_bound.py)."""
    bound_s = config.runtime.collective_timeout_s
    state = write_bound.state_bytes(trainer.training_state())
    bound = write_bound.WriteBound(
        limit_s=write_bound.write_limit_s(config.train.checkpoint_timeout_s, state),
        round_s=rounds.round_seconds(bound_s), rank=info.rank,
        directory=config.train.checkpoint_dir, step_of=lambda: trainer.global_step,
        alive=trainer.watchdog.alive,
        progress_every_s=min(bound_s, write_bound.PROGRESS_EVERY_S))
    if dump is not None:
        bound.after_line = _stacks_report(dump, info, "the checkpoint write passed its bound")
    return bound


def _finish(config, backend, model, record, summary, observer) -> dict:
    """Chief-only side effects of a finished run; returns the summary as written."""
    info = backend.info  # an elastic ring may have re-formed with another chief
    if record.already_complete:
        summary = _earlier_summary(config.summary_path(), summary)
    observer.close(summary)
    if info.is_chief and config.summary_path():
        metrics.write_json_atomic(config.summary_path(), summary)
    if info.is_chief and config.export_weights:
        metrics.write_npz_atomic(config.export_weights, model.weights)
    if not record.already_complete:
        # samples/s: the summary's own figure, so the two never disagree.
        logging.info("done  | steps %d | loss %s | test accuracy %.4f | %s samples/s | %.1f s",
                     summary["steps"], console.number(summary["final_loss"]),
                     summary["test_accuracy"], console.per_second(summary["samples_per_sec"]),
                     summary["wall_seconds"])
    return summary


def run(config) -> dict:
    """Trains per `config` on this process's rank; returns the run summary."""
    clock = startup.StartupClock()
    clock.mark("imports")
    wall_start = time.perf_counter()
    console.use_plain_lines()
    backend, jit = _setup(config, env.launch_info())
    clock.mark("join")
    info = backend.info
    data = data_lib.load(config.data, peers=backend.comm)  # verification split across ranks
    clock.mark("data")
    config, resumption, meta = _resumption(config, backend)
    grid = _plan_grid(config, data.num_train_examples, info.size)
    schedule = schedules.lr_schedule(config.optim, info.size, grid.per_epoch,
                                     scale=resumption.lr_scale,
                                     warmup_steps=resumption.warmup_steps)
    model, optimizer, shards = _build(config, backend, data, schedule)
    built_rss_mb = metrics.peak_rss_mb()  # the model and its optimizer state, before a step
    clock.mark("model")
    observer = observe.create(config, info.is_chief, info.size, grid.total, {
        "world_size": info.size, "backend": backend.name, "model": config.model,
        "dataset": config.data.dataset, "global_batch": step_batch(config) * info.size,
        "total_steps": grid.total, "steps_per_epoch": grid.per_epoch,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S")}, rank=info.rank)
    trainer = Trainer(TrainerOptions.from_config(config, jit), backend, data, model, optimizer,
                      grid, observer, learning_rate=schedule, startup=clock, shards=shards)
    dump = _stack_dump(config, info, trainer.watchdog)
    if info.size > 1:  # bounds the checkpointer's waits on peers too
        trainer.watchdog.start()
    keeper = _keeper(config, backend, data, trainer.training_state(), grid,
                     (resumption, schedule, meta),
                     heartbeat=_write_bound(config, trainer, info, dump), shards=shards)
    try:
        record, facts = _train(trainer, keeper)
    except BaseException as err:
        if dump is not None and watchdog.describe_peer_loss(err, info.rank):
            stacks.report(dump, info.size, info.is_chief, "a peer was lost",
                          watchdog.PEER_LOST_SETTLE_S, error=err)
        raise
    finally:
        if dump is not None:
            dump.close()
    where = trainer.watchdog.where
    summary = dict(_summary(config, backend, model, jit, record, wall_start, where), **facts)
    with where.entering("the summary's memory gather", record.steps):
        summary.update(_state_facts(backend, optimizer, shards, built_rss_mb))
    trainer.watchdog.stop()
    summary = _finish(config, backend, model, record, summary, observer)
    backend.barrier()
    return summary
