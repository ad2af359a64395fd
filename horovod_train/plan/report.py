"""Render a plan: plain-text tables, a JSON-able dict, and a PNG of efficiency vs GPUs."""
from __future__ import annotations

import dataclasses

from horovod_train.plan.cost import Assumptions, Calibration
from horovod_train.plan.hardware import GIB
from horovod_train.plan.recommend import PlanRequest, Recommendation, Row, fabric_for, hours


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
    out.update(
        compute_s=p.compute_s + p.compute.update_s, straggler_s=p.straggler_s,
        input_wait_s=p.data_s, comm_exposed_s=p.comm.exposed_s, comm_busy_s=p.comm.busy_s,
        allreduce_calls=p.comm.calls, allreduce_algorithm=p.comm.algorithm,
        step_s=p.step_s, samples_per_sec=p.throughput, scaling_efficiency=p.efficiency,
        mfu=p.compute.mfu, hours=hours(req, row))
    return out


def to_dict(req: PlanRequest, rows: list[Row], rec: Recommendation, a: Assumptions,
            calib: Calibration) -> dict:
    m = req.model
    best = rec.row
    return {
        "model": {"name": m.name, "params": m.params, "flops_per_sample": m.flops_per_sample,
                  "activation_elems_per_sample": m.act_elems_per_sample, "notes": m.notes},
        "gpu": req.gpu.name, "precision": req.precision, "gpus_per_node": req.gpus_per_node,
        "intra": req.intra.name, "interconnect": req.network.name if req.network else None,
        "nics_per_node": req.nics_per_node, "optimizer": req.optimizer,
        "gradient_checkpointing": req.checkpointing, "compression": req.compression,
        "overlap": req.overlap, "fusion_mib": req.fusion_bytes / 2 ** 20,
        "cycle_ms": req.cycle_s * 1e3, "target_efficiency": req.target_efficiency,
        "target_hours": req.target_hours, "train_samples": req.train_samples,
        "assumptions": dataclasses.asdict(a),
        "calibration": dataclasses.asdict(calib) if calib.source else None,
        "rows": [_row_dict(req, r, rec.accum_for_target.get(r.nodes)) for r in rows],
        "recommendation": None if best is None else {
            "nodes": best.nodes, "gpus": best.world, "batch_per_gpu": best.micro_batch,
            "grad_accum_steps": best.accum_steps, "global_batch": best.global_batch,
            "reason": rec.reason},
        "recommendation_reason": rec.reason,
    }


def _header(req: PlanRequest, a: Assumptions, calib: Calibration) -> list[str]:
    m = req.model
    fab = fabric_for(req, max(req.nodes))
    lines = [f"plan: {m.name} ({m.params / 1e6:.1f} M params, {m.flops_per_sample / 1e9:.1f} "
             f"GFLOP/sample fwd+bwd; {m.notes}) on {req.gpu.name}, {req.precision}"]
    net = "single node"
    if req.network is not None:
        net = (f"{req.nics_per_node} x {req.network.name} per node = "
               f"{fab.net_bw() / 1e9:.1f} GB/s busbw")
    lines.append(f"fabric: {req.gpus_per_node} GPUs/node on {req.intra.name} "
                 f"({fab.intra_bw() / 1e9:.0f} GB/s busbw); {net}")
    lines.append(f"allreduce: {'overlapped with backprop' if req.overlap else 'after backprop'}"
                 f", fusion {req.fusion_bytes / 2 ** 20:g} MiB, cycle {req.cycle_s * 1e3:g} ms, "
                 f"gradients {'fp16' if req.compression == 'fp16' else 'fp32'}; optimizer "
                 f"{req.optimizer}{'; gradient checkpointing' if req.checkpointing else ''}")
    lines.append(f"assumed: {a.matmul_efficiency:.0%} of dense peak for matmuls, "
                 f"{a.memory_efficiency:.0%} of HBM bandwidth x {a.traffic_passes:g} passes over "
                 f"activations, {a.launch_us:g} us/kernel, rank spread sigma "
                 f"{a.device_sigma:.1%} device + {a.step_sigma:.1%}/step")
    lines += [f"calibration: {n}" for n in calib.notes]
    return lines


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return [fmt.format(*headers)] + [fmt.format(*r) for r in rows]


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


def _time_rows(req: PlanRequest, rows: list[Row], rec: Recommendation) -> list[list[str]]:
    out = []
    for r in rows:
        p = r.prediction
        if p is None:
            out.append([str(r.nodes), str(r.world), f"{r.global_batch:g}"] + ["-"] * 9)
            continue
        k = rec.accum_for_target.get(r.nodes)
        h = hours(req, r)
        out.append([str(r.nodes), str(r.world), f"{r.global_batch:g}",
                    f"{(p.compute_s + p.compute.update_s) * 1e3:.1f}",
                    f"{(p.straggler_s + p.data_s) * 1e3:.1f}",
                    f"{p.comm.exposed_s * 1e3:.1f} ({p.comm.busy_s * 1e3:.1f})",
                    f"{p.step_s * 1e3:.1f}", f"{p.throughput:,.0f}", f"{p.efficiency:.1%}",
                    f"{p.compute.mfu:.0%}", "-" if k is None else str(k),
                    "-" if h is None else f"{h:.2f}"])
    return out


def to_text(req: PlanRequest, rows: list[Row], rec: Recommendation, a: Assumptions,
            calib: Calibration) -> str:
    lines = _header(req, a, calib) + ["", "Memory per GPU (GiB)"]
    lines += _table(["nodes", "GPUs", "batch/GPU", "params", "grads", "optim", "activ",
                     "wkspace", "total/cap", "fits"], _memory_rows(rows))
    lines += ["", "Time per optimizer step (ms); comm = exposed (busy); wait = stragglers + input"]
    lines += _table(["nodes", "GPUs", "global", "compute", "wait", "comm", "step",
                     "samples/s", "efficiency", "MFU",
                     f"accum@{req.target_efficiency:.0%}", "hours"], _time_rows(req, rows, rec))
    notes = [f"  {r.nodes} node(s): {n}" for r in rows for n in r.notes]
    if notes:
        lines += ["", "Notes:"] + notes
    lines += ["", _recommendation_line(rec)]
    if any(rec.accum_for_target.get(r.nodes, r.accum_steps) != r.accum_steps for r in rows):
        lines.append(f"  accum@{req.target_efficiency:.0%}: accumulation steps reaching the "
                     "target at the same micro-batch; the global batch grows with them, so "
                     "rescale the learning rate (Goyal et al., arXiv:1706.02677).")
    return "\n".join(lines) + "\n"


def _recommendation_line(rec: Recommendation) -> str:
    r = rec.row
    if r is None:
        return f"Recommendation: none; {rec.reason}"
    p = r.prediction
    return (f"Recommendation: {r.nodes} node(s) = {r.world} GPUs, batch/GPU {r.micro_batch:g} x "
            f"{r.accum_steps} accumulation step(s), global batch {r.global_batch:g}: "
            f"{p.throughput:,.0f} samples/s at {p.efficiency:.1%} efficiency ({rec.reason}).")


def plot(req: PlanRequest, rows: list[Row], path: str) -> None:
    """PNG of predicted scaling efficiency (and throughput) against GPU count."""
    import matplotlib                       # lazy: the planner must not need it to run
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    pts = [r for r in rows if r.prediction is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        ax.plot([r.world for r in pts], [100 * r.prediction.efficiency for r in pts],
                "o-", label="predicted efficiency")
        bad = [r for r in pts if not r.fits]
        if bad:
            ax.plot([r.world for r in bad], [100 * r.prediction.efficiency for r in bad], "rx",
                    markersize=10, label="does not fit in memory")
        ax.axhline(100 * req.target_efficiency, ls="--", c="grey", label="target efficiency")
        ax.set_xscale("log", base=2)
        ax.set_xticks([r.world for r in pts], [str(r.world) for r in pts])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("scaling efficiency (%)")
        ax.set_ylim(0, 105)
        ax2 = ax.twinx()
        ax2.plot([r.world for r in pts], [r.prediction.throughput for r in pts], "s:", c="C2",
                 label="samples/s")
        ax2.set_ylabel(f"{req.model.sample_unit}/s")
        ax2.set_ylim(bottom=0)
        ax.set_title(f"{req.model.name} on {req.gpu.name}, {req.precision}")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower left")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
