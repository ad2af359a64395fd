"""--calibrate RUN_DIR: replace assumed compute and bandwidth by what a run measured.

The reader is deliberately tolerant; it reads RUN_DIR/summary.json (or the file given)
and looks for these keys at the top level or one level down (under "train",
"metrics" or "summary"):

  samples_per_sec (required)  aliases: samples_per_second, throughput
  world_size      (default 1) aliases: size, num_workers, world
  breakdown       (optional)  aliases: step_breakdown, time_breakdown; a dict whose
                  keys contain "compute", "comm" and "data" (any suffix: _s, _frac,
                  _pct). Only their ratios are used, so seconds per step, totals or
                  fractions all work.
  step_time_s     (optional)  aliases: mean_step_s, seconds_per_step, step_time
  batch_per_gpu, grad_accum_steps, global_batch, nodes, gpus_per_node, step_time_cv
                  (all optional)

A run of another model is refused (exit 2): its compute scale would describe the
wrong network. The run's "model" may be the trainer's name of the planned one
(decoder_lm_124m for gpt2-small). A "precision"/"gpu" key that disagrees adds a note.
What it derives:
  - compute scale = measured compute time per sample / predicted;
  - bus bandwidth = 2(W-1)/W * gradient bytes / measured comm time per step: the
    intra-node link's if the run fit on one node, else the per-node network's;
  - input wait per sample, added to every predicted step;
  - step_time_cv, if present, replaces the assumed per-step jitter.
Without a breakdown, a single-GPU run calibrates compute from its throughput; a
multi-GPU run scales compute so that the predicted step time matches.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os

from horovod_train.plan import hardware
from horovod_train.plan.cost import (Assumptions, Calibration, Job, compute, gradient_bytes,
                                     predict)
from horovod_train.plan.errors import PlanError, plan_error
from horovod_train.plan.models import canonical_name
from horovod_train.plan.recommend import PlanRequest, fabric_for, job_for
from horovod_train.plan.report import plural

_NESTS = ("train", "metrics", "summary")
_KEYS = {
    "samples_per_sec": ("samples_per_sec", "samples_per_second", "throughput"),
    "world_size": ("world_size", "size", "num_workers", "world"),
    "breakdown": ("breakdown", "step_breakdown", "time_breakdown"),
    "step_time_s": ("step_time_s", "mean_step_s", "seconds_per_step", "step_time"),
    "batch_per_gpu": ("batch_per_gpu", "micro_batch", "per_gpu_batch"),
    "grad_accum_steps": ("grad_accum_steps", "accum_steps"),
    "global_batch": ("global_batch", "global_batch_size"),
    "nodes": ("nodes", "num_nodes"),
    "gpus_per_node": ("gpus_per_node", "local_size"),
    "step_time_cv": ("step_time_cv",),
}


def load_summary(path: str) -> dict:
    file = os.path.join(path, "summary.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise plan_error("--calibrate", path, "a run directory containing summary.json",
                         "pass the directory a horovod_train run wrote (or its summary.json)")
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        raise plan_error("--calibrate", file, "a readable JSON object",
                         f"fix or regenerate the file ({type(err).__name__})") from err
    if not isinstance(data, dict):
        raise plan_error("--calibrate", file, "a JSON object at the top level",
                         "point --calibrate at a horovod_train summary.json")
    return data


def _find(data: dict, name: str):
    for scope in (data, *(data.get(n) for n in _NESTS)):
        if isinstance(scope, dict):
            for key in _KEYS[name]:
                if key in scope and scope[key] is not None:
                    return scope[key]
    return None


def _number(data: dict, name: str, source: str) -> float | None:
    value = _find(data, name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise plan_error(f"{name} in {source}", value, "a non-negative number",
                         f"fix {name} in the summary or drop the key")
    return float(value)


def _fractions(breakdown) -> dict[str, float] | None:
    """compute/comm/data shares of the step from a breakdown dict, or None."""
    if not isinstance(breakdown, dict):
        return None
    parts = {"compute": 0.0, "comm": 0.0, "data": 0.0}
    for key, value in breakdown.items():
        for part in parts:
            if part in str(key).lower() and isinstance(value, (int, float)) and value >= 0:
                parts[part] += float(value)
    total = sum(parts.values())
    return {k: v / total for k, v in parts.items()} if total > 0 else None


def calibrate(path: str, req: PlanRequest, a: Assumptions = Assumptions()) -> Calibration:
    data = load_summary(path)
    source = path
    sps = _number(data, "samples_per_sec", source)
    if not sps:
        raise plan_error("--calibrate", path, "a summary with samples_per_sec > 0",
                         "calibrate from a run that finished at least one logging interval")
    world = int(_number(data, "world_size", source) or 1)
    _check_model(data, req, path)
    notes = [f"calibrated from {path} ({plural(world, 'GPU')}, {sps:.1f} samples/s)"]
    notes += _mismatches(data, req)
    micro = _number(data, "batch_per_gpu", source) or _plan_micro(req)
    accum = int(_number(data, "grad_accum_steps", source) or req.accum_steps)
    job = job_for(req, micro, accum)
    per_sample = world / sps                                 # GPU-seconds per sample
    c = compute(job, req.gpu, a)
    predicted = (accum * c.micro_s + c.update_s) / (micro * accum)
    shares = _fractions(_find(data, "breakdown"))
    cv = _number(data, "step_time_cv", source)
    if shares is None:
        scale = per_sample / predicted if world == 1 else _fit_step(req, job, world, data, per_sample, a)
        notes.append("no step breakdown: compute scaled to match the measured throughput")
        return Calibration(compute_scale=scale, step_sigma=cv, source=path, notes=tuple(notes))
    scale = shares["compute"] * per_sample / predicted if shares["compute"] > 0 else 1.0
    intra, net = _bandwidth(data, req, world, shares, per_sample, micro, accum, notes)
    data_wait = shares["data"] * per_sample
    notes.append(f"compute x{scale:.2f} of the model's estimate; input wait "
                 f"{data_wait * 1e3:.3f} ms per sample per GPU")
    return Calibration(scale, intra, net, data_wait, cv, path, tuple(notes))


def _plan_micro(req: PlanRequest) -> float:
    if req.batch_per_gpu:
        return float(req.batch_per_gpu)
    world = req.gpus_per_node * req.nodes[0]
    return max(1.0, req.global_batch / (world * req.accum_steps))


def _check_model(data: dict, req: PlanRequest, path: str) -> None:
    run = data.get("model")
    if not isinstance(run, str) or canonical_name(run) == canonical_name(req.model.name):
        return
    raise PlanError(f"--calibrate {path}: received a run of model {run!r}; expected a run of "
                    f"the planned model {req.model.name!r}. Fix: calibrate from a run of "
                    f"{req.model.name}, or plan --model {run}")


def _same_precision(run: str, req: PlanRequest) -> bool:
    # Spellings of one math are one precision: the trainer's fp32 on an A100 is tf32.
    if run not in hardware.PRECISIONS:
        return run == req.precision
    return hardware.matmul_math(req.gpu, run) == hardware.matmul_math(req.gpu, req.precision)


def _mismatches(data: dict, req: PlanRequest) -> list[str]:
    plan = {"precision": req.precision, "gpu": req.gpu.name}
    same = {"precision": lambda run: _same_precision(run, req),
            "gpu": lambda run: run == req.gpu.name}
    return [f"the run's {key} is {data[key]!r} but the plan's is {want!r}: calibration assumes "
            "they match" for key, want in plan.items()
            if isinstance(data.get(key), str) and not same[key](data[key])]


def _bandwidth(data, req, world, shares, per_sample, micro, accum, notes):
    """Measured allreduce bus bandwidth from the comm share of a step."""
    if world <= 1 or shares["comm"] <= 0:
        notes.append("bandwidth not calibrated (single GPU or no comm time in the breakdown)")
        return None, None
    step = _number(data, "step_time_s", "summary") or per_sample * micro * accum
    comm_s = shares["comm"] * step
    grad_bytes = gradient_bytes(req.model, req.compression)
    busbw = 2 * (world - 1) / world * grad_bytes / comm_s
    gpn = _number(data, "gpus_per_node", "summary") or req.gpus_per_node
    nodes = _number(data, "nodes", "summary") or math.ceil(world / gpn)
    where = "intra-node" if nodes <= 1 else "per-node network"
    notes.append(f"measured {comm_s * 1e3:.1f} ms of allreduce per step: {where} bus "
                 f"bandwidth {busbw / 1e9:.1f} GB/s")
    if req.overlap:
        notes.append("the run's comm is taken as the allreduce's whole time, but a run with "
                     "the trainer's default buckets measures only the exposed part, which this "
                     "overlapping plan hides again: calibrate from a --allreduce_bucket_mb=0 "
                     "run and plan --allreduce_bucket_mb 0 to reproduce it")
    return (busbw, None) if nodes <= 1 else (None, busbw)


def _fit_step(req, job: Job, world: int, data: dict, per_sample: float, a: Assumptions) -> float:
    """Compute scale that makes the predicted step of the run's shape match."""
    gpn = int(_number(data, "gpus_per_node", "summary") or min(world, req.gpus_per_node))
    nodes = max(1, math.ceil(world / gpn))
    fabric = dataclasses.replace(fabric_for(req, nodes), gpus_per_node=gpn)
    pred = predict(job, req.gpu, fabric, a)
    measured_step = per_sample * job.micro_batch * job.accum_steps
    other = pred.step_s - pred.compute_s - pred.straggler_s
    compute_part = pred.compute_s + pred.straggler_s
    return max(0.05, (measured_step - other) / compute_part) if compute_part > 0 else 1.0
