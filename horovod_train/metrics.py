"""Throughput, the step-time breakdown, weight digests and the run summary."""
import dataclasses
import hashlib
import json
import os
import tempfile

import numpy as np


@dataclasses.dataclass
class IntervalMeter:
    """Accumulates one logging interval on this rank."""
    steps: int = 0
    samples: int = 0
    data_s: float = 0.0
    step_s: float = 0.0
    loss_sum: float = 0.0

    def add(self, samples: int, data_s: float, step_s: float, loss: float):
        self.steps += 1
        self.samples += samples
        self.data_s += data_s
        self.step_s += step_s
        self.loss_sum += loss

    def breakdown(self, parts: dict | None) -> dict:
        """Fractions of wall time: data wait, then the step split by `parts`, the
        seconds of each part in a sampled step (None before the first sample)."""
        total = self.data_s + self.step_s
        if total <= 0:
            return {}
        parts = parts or {"step": 1.0}
        part_total = sum(parts.values()) or 1.0
        out = {"data": self.data_s / total}
        for name, seconds in parts.items():
            out[name] = self.step_s / total * seconds / part_total
        return out


def format_line(step: int, max_steps: int, loss: float, samples_per_sec: float,
                breakdown: dict) -> str:
    shares = " ".join(f"{k} {100 * v:.0f}%" for k, v in breakdown.items())
    return (f"train | step {step}/{max_steps} | loss {loss:.4f} | "
            f"{samples_per_sec:.0f} samples/s | {shares}")


def weight_digest(variables) -> str:
    """sha256 of every variable's bytes, in order: equal digests = identical weights."""
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(np.asarray(v)).tobytes())
    return h.hexdigest()


def gather_rows(backend, row) -> np.ndarray:
    """Every rank's `row` (floats) as a [size, len] array, on every rank.

    Built from allreduce alone (each rank fills its own row of a zero matrix), so
    any backend can do it without an allgather of its own.
    """
    import tensorflow as tf
    size, rank = backend.info.size, backend.info.rank
    table = np.zeros((size, len(row)), np.float64)
    table[rank] = row
    return backend.allreduce_mean(tf.constant(table)).numpy() * size


def gather_digests(backend, digest: str) -> list[str]:
    byte_rows = gather_rows(backend, list(bytes.fromhex(digest)))
    return [bytes(int(round(b)) for b in row).hex() for row in byte_rows]


def _write_atomic(path: str, write_fn, mode: str):
    """Write aside, then rename: a reader never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write_fn(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: str, payload: dict):
    _write_atomic(path, lambda f: json.dump(payload, f, indent=2, sort_keys=True), "w")


def write_npz_atomic(path: str, variables):
    """Weights by position and path (w000_conv1/kernel), so the order is kept."""
    arrays = {f"w{i:03d}_{v.path.replace('/', '.')}": np.asarray(v) for i, v in enumerate(variables)}
    _write_atomic(path, lambda f: np.savez(f, **arrays), "wb")
