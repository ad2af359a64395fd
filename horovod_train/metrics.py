"""Throughput, the step-time breakdown, weight digests and the run summary."""
import contextlib
import dataclasses
import hashlib
import json
import os
import resource
import tempfile
import time

import numpy as np

from horovod_train import filemode
from horovod_train.errors import write_error
from launch.redact import redact_tree


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all its threads (the OS's count:
    TF's compute, tf.data's readers, Horovod's background thread)."""
    t = os.times()
    return t.user + t.system


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (the kernel's high-water mark)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux counts KiB


def process_age_s() -> float:
    """Seconds since this process started (the kernel's start time, so the interpreter's
    and TensorFlow's start-up count too)."""
    import psutil
    return time.time() - psutil.Process().create_time()


@dataclasses.dataclass
class IntervalMeter:
    """Accumulates one logging interval on this rank.

    data_s and step_s are summed per-step clocks; the interval's own wall clock runs
    from `started` to the log call, minus `excluded_s` (evaluation, one-time graph
    inspection), so wall - data - step - sync is the time between steps ("other")."""
    steps: int = 0
    samples: int = 0
    data_s: float = 0.0
    step_s: float = 0.0
    loss_sum: float = 0.0
    started: float = dataclasses.field(default_factory=time.perf_counter)
    excluded_s: float = 0.0
    sync_s: float = 0.0  # waiting for the other ranks at the interval's metrics gather
    divergence_s: float = 0.0  # comparing the ranks' weights (divergence.py), when it ran
    divergence_traced: bool = False  # that was the first check: it includes its tracing
    # A step of this interval traced or compiled a function: its rate is set-up cost,
    # not throughput (no efficiency, and Throughput leaves it out).
    traced: bool = False
    # This process's CPU seconds over the same span as the wall clock (what other
    # processes' load cannot move: bench/ reports efficiency in CPU-seconds per sample).
    cpu_started: float = dataclasses.field(default_factory=process_cpu_s)
    excluded_cpu_s: float = 0.0

    def add(self, samples: int, data_s: float, step_s: float, loss: float):
        self.steps += 1
        self.samples += samples
        self.data_s += data_s
        self.step_s += step_s
        self.loss_sum += loss

    def exclude(self, wall_started: float, cpu_started: float):
        """Takes what ran since these clock readings (an evaluation, a graph inspection)
        off the interval's wall and CPU time."""
        self.excluded_s += time.perf_counter() - wall_started
        self.excluded_cpu_s += process_cpu_s() - cpu_started

    def cpu(self) -> float:
        return max(process_cpu_s() - self.cpu_started - self.excluded_cpu_s, 0.0)

    def wall(self, now: float) -> float:
        # Never below the measured parts: clocks read microseconds apart can disagree.
        return max(now - self.started - self.excluded_s, self._measured())

    def _measured(self) -> float:
        return self.data_s + self.step_s + self.sync_s + self.divergence_s

    def rank_row(self, now: float) -> list[float]:
        """This rank's [mean loss, samples/s] for the interval (gathered to every rank)."""
        return [self.loss_sum / max(self.steps, 1), self.samples / max(self.wall(now), 1e-9)]

    def seconds_per_step(self, parts: dict | None, now: float) -> dict:
        """Mean seconds per step: data wait, the step split by `parts` (each part's
        seconds in a sampled split step; None before the first sample: one "step"
        part), sync, the divergence check (when it ran) and other (the rest). They add
        up to the wall time per step."""
        n = max(self.steps, 1)
        out = {"data": self.data_s / n, **split_step(parts or {"step": 1.0}, self.step_s / n)}
        out["sync"] = self.sync_s / n
        if self.divergence_s:  # only intervals that held a check: its cost, shown
            out["divergence"] = self.divergence_s / n
        out["other"] = max(self.wall(now) - self._measured(), 0.0) / n
        return out


# Parts of a step spent waiting for the peers, not working: the rest is a rank's own.
WAITING_PARTS = ("comm", "sync")


def own_seconds(per_step: dict) -> float:
    """Seconds of a step (IntervalMeter.seconds_per_step) this rank worked on its own:
    the whole step but its waits for the peers. A rank whose own time is the longest is
    the one the others wait for. Without a sampled split ("step" as one part) the step's
    waits cannot be told apart and count as its own."""
    return sum(v for k, v in per_step.items() if k not in WAITING_PARTS)


def waits(own_per_rank) -> tuple[list[float], int]:
    """(seconds each rank waited per step for the slowest, the slowest rank)."""
    slowest = max(range(len(own_per_rank)), key=lambda r: own_per_rank[r])
    return [own_per_rank[slowest] - own for own in own_per_rank], slowest


def split_step(parts: dict, step_s: float) -> dict:
    """A mean step of `step_s` seconds in the sampled split's parts (seconds each).

    The split runs the allreduce after the whole backward pass, so its `comm` is all of
    the communication; the fused step sends gradient buckets while backprop still runs
    (backends/buckets.py) and waits only for what is left. So comm here is what the
    step takes beyond the split's other parts, at most the split's comm: the exposed
    communication. The other parts fill the rest in their own proportions."""
    comm = parts.get("comm")
    rest = sum(v for k, v in parts.items() if k != "comm")
    if comm is None or rest <= 0:
        total = sum(parts.values()) or 1.0
        return {k: step_s * v / total for k, v in parts.items()}
    exposed = min(comm, max(step_s - rest, 0.0))
    return {k: exposed if k == "comm" else v * (step_s - exposed) / rest
            for k, v in parts.items()}


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


@dataclasses.dataclass
class Throughput:
    """THE samples/s of a run: summary.json's samples_per_sec (so the done line), the
    report's, and the stored 1-rank baseline.

    Definition: the samples trained in the logging intervals that did not trace or
    compile anything, over those intervals' wall time (each interval from its first
    step to its log call: data waits, steps, time between steps and the divergence
    divergence check included; evaluation and one-time graph inspection excluded). Tracing is a
    one-off a user does not pay again per epoch, so it is left out; a run whose every
    interval traced (a very short one) counts them all rather than report nothing.
    One rank's figure; a run's is the sum over its ranks."""
    steady_samples: float = 0.0
    steady_seconds: float = 0.0
    traced_samples: float = 0.0
    traced_seconds: float = 0.0
    steady_cpu_s: float = 0.0
    traced_cpu_s: float = 0.0

    def add(self, samples: float, seconds: float, traced: bool, cpu_s: float = 0.0):
        if traced:
            self.traced_samples += samples
            self.traced_seconds += seconds
            self.traced_cpu_s += cpu_s
        else:
            self.steady_samples += samples
            self.steady_seconds += seconds
            self.steady_cpu_s += cpu_s

    @property
    def steady(self) -> bool:
        """Whether the figure is free of tracing (some interval did not trace)."""
        return self.steady_seconds > 0

    @property
    def samples(self) -> float:
        return self.steady_samples if self.steady else self.traced_samples

    @property
    def seconds(self) -> float:
        return self.steady_seconds if self.steady else self.traced_seconds

    @property
    def cpu_s(self) -> float:
        """This rank's CPU seconds over the same intervals as samples and seconds."""
        return self.steady_cpu_s if self.steady else self.traced_cpu_s

    def rate(self) -> float | None:
        return self.samples / self.seconds if self.seconds > 0 else None


def shares(per_step: dict) -> dict:
    total = sum(per_step.values())
    return {k: v / total for k, v in per_step.items()} if total > 0 else {}


def format_line(step: int, max_steps: int, loss: float, samples_per_sec: float,
                breakdown: dict, per_rank: float | None = None,
                efficiency: float | None = None, eta: str | None = None,
                traced: bool = False, notes: dict | None = None) -> str:
    """The interval line; `notes` adds a word to a part (the first divergence check's
    tracing), and an efficiency above 100% says what that means."""
    notes = notes or {}
    shares_text = " ".join(f"{k} {100 * v:.0f}%" + (f" ({notes[k]})" if k in notes else "")
                           for k, v in breakdown.items())
    extra = [f"{per_rank:.0f}/rank"] if per_rank is not None else []
    if efficiency is not None:
        above = ": each rank faster than the 1-rank run" if efficiency > 1.005 else ""
        extra.append(f"efficiency {100 * efficiency:.0f}%{above}")
    if traced:  # why this interval's rate is low and has no efficiency
        extra.append("includes tracing")
    rate = f"{samples_per_sec:.0f} samples/s" + (f" ({', '.join(extra)})" if extra else "")
    line = f"train | step {step}/{max_steps} | loss {loss:.4f} | {rate} | {shares_text}"
    return line + (f" | eta {eta}" if eta else "")


def weight_digest(variables) -> str:
    """sha256 of every variable's bytes, in order: equal digests = identical weights."""
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(np.asarray(v)).tobytes())
    return h.hexdigest()


def gather_rows(backend, row) -> np.ndarray:
    """Every rank's `row` (floats) as a [size, len] array, on every rank: one allgather
    of this rank's row (a one-process communicator returns the row itself)."""
    import tensorflow as tf
    mine = tf.constant(np.asarray(row, np.float64).reshape(1, -1))
    return backend.comm.allgather(mine).numpy()


def gather_digests(backend, digest: str) -> list[str]:
    byte_rows = gather_rows(backend, list(bytes.fromhex(digest)))
    return [bytes(int(round(b)) for b in row).hex() for row in byte_rows]


# Written after the last checkpoint: a failure here loses records, not training.
_KEPT = "training state in --checkpoint_dir is untouched"


def _write_atomic(path: str, write_fn, mode: str, flag: str):
    """Write aside, then rename: a reader never sees half a file. A disk that refuses
    (full, read-only, a file where a directory should be) is one UsageError line
    naming `flag` and the path, and the partial file is removed."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=".tmp")
    except OSError as err:
        raise write_error(flag, path, err, f"point {flag} at a writable directory; {_KEPT}") from None
    try:
        os.fchmod(fd, filemode.new_file_mode())  # mkstemp's 0600 would outlive the rename
        with os.fdopen(fd, mode) as f:
            write_fn(f)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise write_error(flag, path, err, f"free space or point {flag} elsewhere; {_KEPT}") \
                from None
        raise


def write_json_atomic(path: str, payload: dict, flag: str = "--summary_json"):
    """flag: what the message names (the summary's default path is under --run_dir).
    Credentials in its strings (the config's paths) are masked: launch/redact.py."""
    shown = redact_tree(payload)
    _write_atomic(path, lambda f: json.dump(shown, f, indent=2, sort_keys=True), "w", flag)


def write_npz_atomic(path: str, variables, flag: str = "--export_weights"):
    """Weights by position and path (w000_conv1/kernel), so the order is kept."""
    arrays = {f"w{i:03d}_{v.path.replace('/', '.')}": np.asarray(v) for i, v in enumerate(variables)}
    _write_atomic(path, lambda f: np.savez(f, **arrays), "wb", flag)
