"""The chief's Observer and its no-op twin.

The loop measures on every rank (the numbers feed collectives every rank must join)
and hands each interval's record to `observer.interval`. Only the chief's observer
prints and writes files; every other rank holds a NullObserver, so non-chief ranks
write nothing without the loop ever asking which rank it is.
"""
import contextlib
import json
import os
import time

from absl import logging

from horovod_train import filemode
from horovod_train.errors import UsageError, write_error
from horovod_train.observe import baseline, profiler, progress
from horovod_train.observe.straggler import StragglerWatch, wait_scalars, wait_tags
from horovod_train.observe.writer import BackgroundWriter
from launch.private_files import Refused, open_append, own_dir, shared_dir_warning
from launch.redact import redact_tree

METRICS_FILE = "metrics.jsonl"
# The breakdown's parts, in order, and what each one is: the console's legend line, the
# plots and docs/observability.md use these names and words (so do TensorBoard's tags,
# breakdown/<part>_ms, and the records' seconds_per_step).
PART_MEANINGS = {
    "data": "waiting for the next batch",
    "compute": "forward and backward",
    "comm": "the allreduce not hidden behind backprop",
    "optimizer": "unscale, finite check, apply",
    "step": "the whole step, before a sampled step splits it",
    "sync": "waiting for the slowest rank",
    "divergence": "the cross-rank weight check (--divergence_check_steps), the first one "
                  "with its one-time tracing",
    "other": "the rest (logging, checkpoints)",
}
BREAKDOWN_PARTS = tuple(PART_MEANINGS)
EFFICIENCY_MEANING = ("efficiency: samples/s over ranks x the 1-rank run's; above 100%, "
                      "each rank beat the 1-rank run")
# Parts records written before a part was renamed still carry: the new name of each.
RENAMED_PARTS = {"guard": "divergence"}


def legend() -> str:
    """The line printed once, before the first interval line: every part and figure."""
    parts = "; ".join(f"{part}: {meaning}" for part, meaning in PART_MEANINGS.items())
    return f"legend | {parts} | {EFFICIENCY_MEANING}"
# Fixed tag sets (a part or figure not measured this interval is written as nothing),
# so TensorBoard's write function is compiled once per set, at start-up.
TRAIN_TAGS = ("train/loss", "train/learning_rate", "train/loss_scale",
              "throughput/samples_per_sec", "throughput/samples_per_sec_per_rank",
              "throughput/efficiency", "time/step_ms", "gpu/utilization_pct",
              "gpu/memory_mib") + tuple(f"breakdown/{p}_ms" for p in BREAKDOWN_PARTS)
EVAL_TAGS = ("eval/accuracy", "eval/loss")
# The records are the chief's alone and come after nothing a resume needs.
RUN_DIR_FIX = ("free space or point --run_dir elsewhere (--noinstrument writes no records); "
               "training state in --checkpoint_dir is untouched")


@contextlib.contextmanager
def _writing(path: str):
    """A refused write under --run_dir (full disk, a file in the way) as one line naming
    the file, on whichever thread it happens; the writer hands it to the training thread."""
    try:
        yield
    except OSError as err:
        raise write_error("--run_dir", err.filename or path, err, RUN_DIR_FIX) from None


def _open_records(path: str):
    """metrics.jsonl open for appending, or None (said in one line) when something not
    ours is in its place: a link another user planted where the run dir lets them.
    Appended, one JSON object per line and flushed: a resumed run continues the file
    after a new "start" record, and a reader never sees half a line."""
    try:
        fd = open_append(path, filemode.new_file_mode())
    except Refused as err:
        logging.warning("records | %s; this run goes on without %s", err, METRICS_FILE)
        return None
    return os.fdopen(fd, "a")


def _tensorboard_dir(path: str) -> bool:
    """Whether RUN/tb is (or is now made) a directory of ours: TensorFlow opens its events
    file there by a name of its own (private_files.own_dir); otherwise said in one line."""
    try:
        own_dir(path)
    except Refused as err:
        logging.warning("records | %s; this run goes on without TensorBoard", err)
        return False
    return True


def traced(record: dict, index: int) -> bool:
    """Whether an interval traced; records written before the flag existed: the first."""
    return record.get("traced", index == 0)



class NullObserver:
    """Every hook, doing nothing."""

    def before_step(self, step: int):
        pass

    def after_step(self, step: int):
        pass

    def startup(self, seconds: dict):
        pass

    def interval(self, record: dict):
        pass

    def evaluation(self, label: str, record: dict):
        pass

    def close(self, summary: dict):
        pass


class ChiefObserver(NullObserver):
    def __init__(self, config, world_size: int, total_steps: int, start_record: dict):
        obs = config.observe
        self.run_dir = obs.run_dir
        self.world_size = world_size
        self.cache = obs.baseline_cache
        self.key = baseline.config_key(config.to_dict())
        self.baseline, source = baseline.resolve(obs, self.key)
        self.progress = progress.Progress(obs.progress, total_steps)
        self.started = time.perf_counter()
        self._steady_seen = False  # an interval that traced nothing was logged
        self._legend_shown = False
        self.straggler = StragglerWatch(world_size)
        self.train_tags = TRAIN_TAGS + wait_tags(world_size)
        self._jsonl = self._tb = self._writer = None
        self._log_baseline(source)
        shared = shared_dir_warning(self.run_dir) if self.run_dir else None
        if shared:
            logging.warning("run dir | %s", shared)
        if self.run_dir and obs.instrument:
            self._open_sinks(dict(start_record, config_key=self.key,
                                  baseline_samples_per_sec=self.baseline,
                                  baseline_source=source, config=config.to_dict()))

    def _log_baseline(self, source):
        if self.world_size == 1:
            return  # one rank has no efficiency to compute: the baseline is not used
        if self.baseline:
            logging.info("scaling | 1-rank baseline %.0f samples/s (from %s)",
                         self.baseline, source)
        else:
            logging.info("scaling | no efficiency: no 1-rank run of this config (key %s) is "
                         "known; train it once with 1 rank and --run_dir, or pass "
                         "--baseline_samples_per_sec", self.key)

    def _open_sinks(self, start_record: dict):
        from horovod_train.observe.tensorboard import ScalarWriter
        self._jsonl_path = os.path.join(self.run_dir, METRICS_FILE)
        self._tb_dir = os.path.join(self.run_dir, "tb")
        with _writing(self._jsonl_path):
            os.makedirs(self.run_dir, exist_ok=True)
            self._jsonl = _open_records(self._jsonl_path)
        if self._jsonl:
            self._append(dict(start_record, kind="start"))
        with _writing(self._tb_dir):
            if _tensorboard_dir(self._tb_dir):
                self._tb = ScalarWriter(self._tb_dir, [self.train_tags, EVAL_TAGS])
        if self._jsonl or self._tb:
            self._writer = BackgroundWriter()

    def _append(self, record: dict):
        if not self._jsonl:
            return  # refused at start (a link in its place): said then
        # The start record holds the config, paths included: no credential in the file.
        with _writing(self._jsonl_path):
            self._jsonl.write(json.dumps(redact_tree(record), sort_keys=True) + "\n")
            self._jsonl.flush()

    def _write(self, record: dict, scalars: dict):
        """On the writer thread: one metrics.jsonl line and its TensorBoard scalars."""
        self._append(record)
        if self._tb:
            with _writing(self._tb_dir):
                self._tb.write(record["step"], scalars)

    def after_step(self, step: int):
        self.progress.step(step)

    def _efficiency(self, record: dict):
        """None for one rank (against a stored one-rank figure it says nothing about
        scaling) and for an interval that traced (its rate is compile time)."""
        if self.world_size == 1 or record["traced"]:
            return None
        return baseline.efficiency(record["samples_per_sec"], self.world_size, self.baseline)

    def interval(self, record: dict):
        step_s = sum(record["seconds_per_step"].values())
        remaining = record["total_steps"] - record["step"]
        record = dict(record, traced=bool(record.get("traced")))  # absent: nothing traced
        record.update(kind="train", efficiency=self._efficiency(record), step_s=step_s,
                      eta_s=remaining * step_s, time_s=time.perf_counter() - self.started)
        self._steady_seen |= not record["traced"]
        if not self._legend_shown:
            self.progress.note(legend())
            self._legend_shown = True
        per_rank = record["samples_per_sec_per_rank"]
        from horovod_train import metrics
        line = metrics.format_line(
            record["step"], record["total_steps"], record["loss"], record["samples_per_sec"],
            metrics.shares(record["seconds_per_step"]),
            per_rank=sum(per_rank) / len(per_rank) if self.world_size > 1 else None,
            efficiency=record["efficiency"], eta=progress.format_eta(record["eta_s"]),
            traced=record["traced"], notes={"divergence": "first check, includes tracing"}
            if record.get("divergence_traced") else None)
        self.progress.line(line, record["step"], record["samples_per_sec"], step_s)
        lagging = self.straggler.add(record)
        if lagging:
            self.progress.note(f"straggler | {lagging}")
        if self._writer:
            self._writer.submit(self._write, record, _train_scalars(record, self.train_tags))

    def startup(self, seconds: dict):
        """After this process's first step: the `start-up |` line and its record."""
        from horovod_train import startup
        self.progress.note(startup.line(seconds))
        if self._writer:
            self._writer.submit(self._append, {"kind": "startup", "seconds": seconds})

    def evaluation(self, label: str, record: dict):
        self.progress.note(
            f"eval  | {label} | step {record['step']} | test accuracy {record['accuracy']:.4f} "
            f"| test loss {record['loss']:.4f} on {record['count']} predictions")
        if self._writer:
            self._writer.submit(self._write, dict(record, kind="eval", label=label,
                                                  time_s=time.perf_counter() - self.started),
                                {"eval/accuracy": record["accuracy"], "eval/loss": record["loss"]})

    def close(self, summary: dict):
        lagging = self.straggler.verdict()
        if lagging:  # the whole run's account, after the first warning
            self.progress.note(f"straggler | over the run: {lagging}")
        self.progress.close()
        if self._writer:
            self._writer.close()  # every interval's record is on disk before "end"
            self._append({"kind": "end", "steps": summary["steps"],
                          "samples_per_sec": summary["samples_per_sec"],
                          "wall_seconds": summary["wall_seconds"],
                          "test_accuracy": summary["test_accuracy"]})
            if self._jsonl:
                with _writing(self._jsonl_path):
                    self._jsonl.close()
            if self._tb:
                with _writing(self._tb_dir):
                    self._tb.close()
            self._store_baseline(summary)

    def _store_baseline(self, summary: dict):
        """The summary's figure (metrics.Throughput), when it is free of tracing: a run
        whose every interval traced would store its compile time as the baseline."""
        rate = summary["samples_per_sec"]
        if self.world_size == 1 and self.cache and self._steady_seen and rate and rate > 0:
            try:
                baseline.store(self.cache, self.key, rate, self.run_dir)
            except UsageError as err:  # a cache: losing it costs a figure, not the run
                logging.warning("scaling | baseline not stored: %s", err)
                return
            logging.info("scaling | stored %.0f samples/s as the 1-rank baseline of config "
                         "key %s in %s", rate, self.key, self.cache)


def _train_scalars(record: dict, tags=TRAIN_TAGS) -> dict:
    scalars = dict.fromkeys(tags)
    scalars.update(wait_scalars(record))
    scalars.update({"train/loss": record["loss"], "train/learning_rate": record.get("learning_rate"),
               "train/loss_scale": record.get("loss_scale"),
               "throughput/samples_per_sec": record["samples_per_sec"],
               "throughput/samples_per_sec_per_rank":
                   sum(record["samples_per_sec_per_rank"]) / len(record["samples_per_sec_per_rank"]),
               "throughput/efficiency": record["efficiency"],
               "time/step_ms": 1000 * record["step_s"],
               "gpu/utilization_pct": record.get("gpu_util_pct"),
               "gpu/memory_mib": record.get("gpu_mem_mib")})
    for part, seconds in record["seconds_per_step"].items():
        scalars[f"breakdown/{part}_ms"] = 1000 * seconds
    return scalars


def create(config, is_chief: bool, world_size: int, total_steps: int, start_record: dict,
           rank: int = 0):
    """The chief's observer (a no-op elsewhere), driving this rank's profile window when
    it is one of --profile_ranks (observe/profiler.py)."""
    observer = ChiefObserver(config, world_size, total_steps, start_record) if is_chief \
        else NullObserver()
    window = profiler.for_rank(config.observe, rank, is_chief)
    return profiler.Profiled(observer, window) if window is not None else observer
