"""Scaling efficiency against one rank's throughput, and where that figure comes from.

efficiency = total samples/s / (world size x one rank's samples/s alone). The
single-rank figure is --baseline_samples_per_sec, or else one stored by an earlier
1-rank run of the same config on the same kind of machine. Runs find each other by a
key: a hash of the config without the fields that change with the world size or do
not change the work a rank does per step (the backend and its communication knobs,
run length, logging, paths, seed), plus the machine's architecture and core count.
"""
import hashlib
import json
import os
import platform
import time

# Config fields (dotted) that do not enter the key.
IGNORED = frozenset({
    "runtime.backend", "runtime.collective", "runtime.collective_timeout_s",
    "runtime.mwms_port_base", "runtime.fusion_threshold_mb", "runtime.cycle_time_ms",
    "runtime.hierarchical_allreduce", "runtime.seed", "speed.compression",
    "speed.allreduce_bucket_mb",
    "speed.max_nonfinite_steps", "speed.inject_nonfinite",
    "train.epochs", "train.max_steps", "train.log_every", "train.eval_every_epochs",
    "train.eval_at_start", "train.checkpoint_dir", "train.checkpoint_every",
    "train.keep_checkpoints", "summary_json", "export_weights",
})
IGNORED_SECTIONS = ("observe",)


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = list(value) if isinstance(value, tuple) else value
    return flat


def config_key(config_dict: dict, machine: str | None = None) -> str:
    """16 hex digits naming 'this work per rank on this kind of machine'."""
    kept = {k: v for k, v in _flatten(config_dict).items()
            if k not in IGNORED and not k.startswith(IGNORED_SECTIONS)}
    kept["machine"] = machine if machine is not None else \
        f"{platform.machine()}-{os.cpu_count()}cpu"
    blob = json.dumps(kept, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def efficiency(total_samples_per_sec: float, world_size: int, baseline) -> float | None:
    """Total throughput over world_size perfect copies of the single-rank baseline."""
    if not baseline or baseline <= 0 or world_size < 1:
        return None
    return total_samples_per_sec / (world_size * baseline)


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            table = json.load(f)
        return table if isinstance(table, dict) else {}
    except (OSError, ValueError):
        return {}  # no cache yet, or a damaged one: no baseline, never a failure


def lookup(path: str, key: str):
    """(samples/s, source) of the stored single-rank run with this key, or (None, None)."""
    if not path:
        return None, None
    entry = _read(os.path.expanduser(path)).get(key)
    if not isinstance(entry, dict) or not entry.get("samples_per_sec"):
        return None, None
    return float(entry["samples_per_sec"]), entry.get("run_dir") or path


def store(path: str, key: str, samples_per_sec: float, run_dir: str | None):
    """Records a 1-rank run's throughput under its key (written aside, then renamed)."""
    from horovod_train import metrics
    path = os.path.expanduser(path)
    table = _read(path)
    table[key] = {"samples_per_sec": samples_per_sec, "run_dir": run_dir,
                  "stored_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    metrics.write_json_atomic(path, table, flag="--baseline_cache")


def resolve(observe, key: str):
    """(samples/s, source): the flag wins over the cache."""
    if observe.baseline_samples_per_sec:
        return observe.baseline_samples_per_sec, "--baseline_samples_per_sec"
    return lookup(observe.baseline_cache, key)
