"""Render a plan: plain-text tables and a JSON-able dict (the PNG: plot.py).

A configuration that does not fit in memory cannot run, so it gets no step time,
hours, GPU-hours nor cost anywhere: the tables and the JSON say why instead.
"""
from __future__ import annotations

import dataclasses

from horovod_train.plan import hardware
from horovod_train.plan.cost import Assumptions, Calibration
from horovod_train.plan.hardware import GIB
from horovod_train.plan.recommend import (PlanRequest, Recommendation, Row, cost, does_not_fit,
                                          fabric_for, gpu_hours, hours)


def plural(n: float, unit: str) -> str:
    """`1 GPU`, `8 GPUs`, `1 node`, `2 nodes`."""
    return f"{n:g} {unit}" + ("" if n == 1 else "s")


def warnings(req: PlanRequest) -> list[str]:
    return [w for w in (hardware.tf32_warning(req.gpu, req.precision),) if w]


def precision_text(req: PlanRequest) -> str:
    """`fp32 (tf32 math)` where TF runs the precision as another math."""
    kind = hardware.matmul_math(req.gpu, req.precision)
    return req.precision if kind == req.precision else f"{req.precision} ({kind} math)"


def _row_dict(req: PlanRequest, row: Row, accum_target: int | None) -> dict:
    out = {"nodes": row.nodes, "gpus": row.world, "batch_per_gpu": row.micro_batch,
           "grad_accum_steps": row.accum_steps, "global_batch": row.global_batch,
           "fits": row.fits, "notes": list(row.notes),
           "accum_steps_for_target_efficiency": accum_target}
    p = row.prediction
    if p is None:
        return out
    out["memory_gib"] = {k.replace(" ", "_"): v / GIB for k, v in p.memory.terms().items()}
    out["memory_gib"].update(total=p.memory.total / GIB, capacity=p.memory.capacity / GIB)
    if not row.fits:
        out["does_not_fit"] = does_not_fit(row)
        return out
    out.update(
        compute_s=p.compute_s + p.compute.update_s, straggler_s=p.straggler_s,
        input_wait_s=p.data_s, comm_exposed_s=p.comm.exposed_s, comm_busy_s=p.comm.busy_s,
        allreduce_calls=p.comm.calls, allreduce_algorithm=p.comm.algorithm,
        step_s=p.step_s, samples_per_sec=p.throughput, scaling_efficiency=p.efficiency,
        mfu=p.compute.mfu, hours=hours(req, row), gpu_hours=gpu_hours(req, row))
    if req.price_per_gpu_hour is not None:
        out["cost_usd"] = cost(req, row)
    return out


def to_dict(req: PlanRequest, rows: list[Row], rec: Recommendation, a: Assumptions,
            calib: Calibration) -> dict:
    m = req.model
    best = rec.row
    return {
        "model": {"name": m.name, "params": m.params, "flops_per_sample": m.flops_per_sample,
                  "activation_elems_per_sample": m.act_elems_per_sample, "notes": m.notes},
        "warnings": warnings(req),
        "gpu": req.gpu.name, "gpu_arch": req.gpu.arch, "precision": req.precision,
        "matmul_math": hardware.matmul_math(req.gpu, req.precision),
        "gpus_per_node": req.gpus_per_node,
        "intra": req.intra.name, "interconnect": req.network.name if req.network else None,
        "nics_per_node": req.nics_per_node, "optimizer": req.optimizer,
        "gradient_checkpointing": req.checkpointing, "compression": req.compression,
        "shard_optimizer_state": req.shard_optimizer_state,
        "overlap": req.overlap, "fusion_threshold_mb": req.fusion_bytes / 2 ** 20,
        "cycle_time_ms": req.cycle_s * 1e3, "horovod_build": req.horovod_build,
        "target_efficiency": req.target_efficiency,
        "target_hours": req.target_hours, "train_samples": req.train_samples,
        "objective": req.objective, "price_per_gpu_hour": req.price_per_gpu_hour,
        "assumptions": dataclasses.asdict(a),
        "calibration": dataclasses.asdict(calib) if calib.source else None,
        "rows": [_row_dict(req, r, rec.accum_for_target.get(r.nodes)) for r in rows],
        "recommendation": None if best is None else {
            "nodes": best.nodes, "gpus": best.world, "batch_per_gpu": best.micro_batch,
            "grad_accum_steps": best.accum_steps, "global_batch": best.global_batch,
            "hours": hours(req, best), "gpu_hours": gpu_hours(req, best),
            "cost_usd": cost(req, best), "levers": list(best.levers), "reason": rec.reason},
        "recommendation_reason": rec.reason,
    }


def _header(req: PlanRequest, a: Assumptions, calib: Calibration) -> list[str]:
    m = req.model
    fab = fabric_for(req, max(req.nodes))
    lines = [f"plan: {m.name} ({m.params / 1e6:.1f} M params, {m.flops_per_sample / 1e9:.1f} "
             f"GFLOP/sample fwd+bwd; {m.notes}) on {req.gpu.name}, {precision_text(req)}"]
    net = "single node"
    if req.network is not None:
        net = (f"{req.nics_per_node} x {req.network.name} per node = "
               f"{fab.net_bw() / 1e9:.1f} GB/s busbw")
    lines.append(f"fabric: {req.gpus_per_node} GPUs/node on {req.intra.name} "
                 f"({fab.intra_bw() / 1e9:.0f} GB/s busbw); {net}")
    lines.append(f"allreduce: {'overlapped with backprop' if req.overlap else 'after backprop'}"
                 f", fusion {req.fusion_bytes / 2 ** 20:g} MiB, cycle {req.cycle_s * 1e3:g} ms "
                 f"({req.horovod_build} horovod), "
                 f"gradients {'fp32' if req.compression == 'none' else req.compression}; optimizer "
                 f"{req.optimizer}{'; gradient checkpointing' if req.checkpointing else ''}"
                 f"{'; optimizer state sharded' if req.shard_optimizer_state else ''}")
    lines.append(f"assumed: {a.matmul_efficiency:.0%} of dense peak for matmuls, "
                 f"{a.memory_efficiency:.0%} of HBM bandwidth x {a.traffic_passes:g} passes over "
                 f"activations, {a.launch_us:g} us/kernel, rank spread sigma "
                 f"{a.device_sigma:.1%} device + {a.step_sigma:.1%}/step")
    lines += [f"calibration: {n}" for n in calib.notes]
    return lines


def _table(headers: list[str], rows: list[list[str]], left_last: bool = False) -> list[str]:
    """Right-aligned columns; with left_last the last one (free text) is left-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    aligns = [">"] * len(widths)
    if left_last:
        aligns[-1] = "<"
    fmt = "  ".join(f"{{:{a}{w}}}" for a, w in zip(aligns, widths))
    return [fmt.format(*r).rstrip() for r in [headers] + rows]


def _memory_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        batch = f"{r.micro_batch:g}x{r.accum_steps}"
        if r.prediction is None:
            out.append([str(r.nodes), str(r.world), batch] + ["-"] * 6 + ["n/a"])
            continue
        m = r.prediction.memory
        out.append([str(r.nodes), str(r.world), batch]
                   + [f"{v / GIB:.2f}" for v in m.terms().values()]
                   + [f"{m.total / GIB:.1f}/{m.capacity / GIB:.0f}",
                      "yes" if m.fits else f"NO +{m.over_by / GIB:.1f}"])
    return out


def _time_headers(req: PlanRequest) -> list[str]:
    money = ["cost $"] if req.price_per_gpu_hour is not None else []
    return (["nodes", "GPUs", "global", "compute", "wait", "comm", "step", "samples/s",
             "efficiency", "MFU", f"accum@{req.target_efficiency:.0%}", "hours", "GPU-hours"]
            + money + [""])


def _time_rows(req: PlanRequest, rows: list[Row], rec: Recommendation) -> list[list[str]]:
    width = len(_time_headers(req)) - 4
    out = []
    for r in rows:
        head = [str(r.nodes), str(r.world), f"{r.global_batch:g}"]
        if not r.fits:
            why = (f"does not fit: {does_not_fit(r)}" if r.prediction is not None
                   else "cannot split the batch (see notes)")
            out.append(head + ["-"] * width + [why])
            continue
        p, k = r.prediction, rec.accum_for_target.get(r.nodes)
        h, g, c = hours(req, r), gpu_hours(req, r), cost(req, r)
        cells = [f"{(p.compute_s + p.compute.update_s) * 1e3:.1f}",
                 f"{(p.straggler_s + p.data_s) * 1e3:.1f}",
                 f"{p.comm.exposed_s * 1e3:.1f} ({p.comm.busy_s * 1e3:.1f})",
                 f"{p.step_s * 1e3:.1f}", f"{p.throughput:,.0f}", f"{p.efficiency:.1%}",
                 f"{p.compute.mfu:.0%}", "-" if k is None else str(k),
                 "-" if h is None else f"{h:.2f}", "-" if g is None else f"{g:,.1f}"]
        if req.price_per_gpu_hour is not None:
            cells.append("-" if c is None else f"{c:,.2f}")
        out.append(head + cells + [""])
    return out


def to_text(req: PlanRequest, rows: list[Row], rec: Recommendation, a: Assumptions,
            calib: Calibration, said=()) -> str:
    """`said`: lines the command line adds under the header (cli.py: the length's flag,
    whether the trainer can train the model)."""
    lines = [f"warning: {w}" for w in warnings(req)]
    lines += _header(req, a, calib) + list(said) + ["", "Memory per GPU (GiB)"]
    lines += _table(["nodes", "GPUs", "batch/GPU", "params", "grads", "optim", "activ",
                     "wkspace", "total/cap", "fits"], _memory_rows(rows))
    lines += ["", "Time per optimizer step (ms); comm = exposed (busy); wait = stragglers + input; "
              "GPU-hours = GPUs x hours" + (f"; cost at ${req.price_per_gpu_hour:g} per GPU-hour"
                                            if req.price_per_gpu_hour is not None else "")]
    lines += _table(_time_headers(req), _time_rows(req, rows, rec), left_last=True)
    if req.train_samples is None:
        lines.append("  (no training length: pass --epochs E or --train_samples N for hours, "
                     "GPU-hours and cost)")
    notes = [f"  {plural(r.nodes, 'node')}: {n}" for r in rows for n in r.notes]
    if notes:
        lines += ["", "Notes:"] + notes
    lines += ["", _recommendation_line(req, rec)]
    if any(rec.accum_for_target.get(r.nodes) not in (None, r.accum_steps) for r in rows):
        lines.append(f"  accum@{req.target_efficiency:.0%}: accumulation steps reaching the "
                     "target at the same micro-batch; the global batch grows with them, so "
                     "rescale the learning rate (Goyal et al., arXiv:1706.02677).")
    return "\n".join(lines) + "\n"


def _recommendation_line(req: PlanRequest, rec: Recommendation) -> str:
    r = rec.row
    if r is None:
        return f"Recommendation: none; {rec.reason}"
    p = r.prediction
    h, g, c = hours(req, r), gpu_hours(req, r), cost(req, r)
    length = "" if h is None else f", {h:.2f} h = {g:,.1f} GPU-hours"
    money = "" if c is None else f" = ${c:,.2f}"
    levers = (f"as planned it does not fit, with {' '.join(r.levers)} it does; " if r.levers
              else "")
    return (f"Recommendation: {plural(r.nodes, 'node')} = {plural(r.world, 'GPU')}, batch/GPU "
            f"{r.micro_batch:g} x {plural(r.accum_steps, 'accumulation step')}, global batch "
            f"{r.global_batch:g}: {p.throughput:,.0f} samples/s at {p.efficiency:.1%} "
            f"efficiency{length}{money} ({levers}{rec.reason}).")
