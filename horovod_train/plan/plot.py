"""--plot FILE.png: scaling efficiency and training time (and cost) against GPU count.

series() is the pure part (what is drawn, every label as text) so that tests can read
it; plot() only hands it to matplotlib, imported lazily: the planner runs without it.
Configurations that do not fit in memory get no point, only a marker on the GPU axis
saying so, as in the tables.
"""
from __future__ import annotations

import dataclasses

from horovod_train.plan.recommend import (PlanRequest, Recommendation, Row, cost, does_not_fit,
                                          hours)
from horovod_train.plan.report import plural, precision_text


@dataclasses.dataclass(frozen=True)
class Series:
    x: list[int]                 # GPUs of the configurations that fit
    labels: list[str]            # point labels, one per x
    y: list[float]


@dataclasses.dataclass(frozen=True)
class PlotData:
    title: str
    ticks: list[int]
    tick_labels: list[str]       # "1 GPU", "8 GPUs"
    efficiency: Series           # percent
    right: Series                # hours, or samples/s without a training length
    right_label: str
    cost: Series | None          # USD, when priced
    misfits: list[tuple[int, str]]      # (GPUs, "does not fit: 41.2 GiB > 40 GiB")
    recommended: int | None      # GPUs of the recommendation, if listed
    target_efficiency: float


def series(req: PlanRequest, rows: list[Row], rec: Recommendation | None = None) -> PlotData:
    fit = [r for r in rows if r.fits]
    xs = [r.world for r in fit]
    eff = [100 * r.prediction.efficiency for r in fit]
    efficiency = Series(xs, [f"{e:.0f}%" for e in eff], eff)
    if req.train_samples is not None:
        h = [hours(req, r) for r in fit]
        right = Series(xs, [f"{v:.2f} h" for v in h], h)
        right_label = "training time (hours)"
    else:
        t = [r.prediction.throughput for r in fit]
        right = Series(xs, [f"{v:,.0f}/s" for v in t], t)
        right_label = f"{req.model.sample_unit}/s"
    priced = None
    if req.price_per_gpu_hour is not None and req.train_samples is not None:
        c = [cost(req, r) for r in fit]
        priced = Series(xs, [f"${v:,.0f}" for v in c], c)
    misfits = [(r.world, f"does not fit: {does_not_fit(r)}") for r in rows
               if r.prediction is not None and not r.fits]
    ticks = sorted({r.world for r in rows})
    best = rec.row.world if rec is not None and rec.row is not None else None
    return PlotData(f"{req.model.name} on {req.gpu.name}, {precision_text(req)}", ticks,
                    [plural(t, "GPU") for t in ticks], efficiency, right, right_label, priced,
                    misfits, best if best in ticks else None, req.target_efficiency)


def plot(req: PlanRequest, rows: list[Row], path: str, rec: Recommendation | None = None) -> None:
    import matplotlib                       # lazy: the planner must not need it to run
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    d = series(req, rows, rec)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8))
    try:
        _efficiency_panel(left, d)
        _time_panel(right, d)
        fig.suptitle(d.title)
        fig.tight_layout()
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def _gpu_axis(ax, d: PlotData) -> None:
    if len(d.ticks) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(d.ticks, d.tick_labels, rotation=30 if len(d.ticks) > 5 else 0)
    ax.minorticks_off()
    ax.margins(x=0.12)                  # room for the last point's label inside the frame
    ax.set_xlabel("GPUs")
    ax.grid(alpha=0.3)


def _label_points(ax, s: Series, color: str, dy: int) -> None:
    # Up (or down) and to the right of the point, clear of the line through it.
    for x, y, text in zip(s.x, s.y, s.labels):
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), ha="left",
                    fontsize=8, color=color)


def _mark_misfits(ax, d: PlotData) -> None:
    for gpus, why in d.misfits:
        ax.plot([gpus], [0], "rx", markersize=10, clip_on=False)
        ax.annotate(why, (gpus, 0), textcoords="offset points", xytext=(0, 8), ha="center",
                    fontsize=7, color="red", rotation=90, va="bottom")
    if d.misfits:
        ax.plot([], [], "rx", label="does not fit in memory")


def _legend_below(ax, handles, labels) -> None:
    # Below the axes, never over the points.
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=min(3, len(labels)), fontsize=8, frameon=False)


def _efficiency_panel(ax, d: PlotData) -> None:
    ax.plot(d.efficiency.x, d.efficiency.y, "o-", label="predicted scaling efficiency")
    _label_points(ax, d.efficiency, "C0", 7)
    ax.axhline(100 * d.target_efficiency, ls="--", c="grey",
               label=f"target {d.target_efficiency:.0%}")
    _mark_misfits(ax, d)
    if d.recommended in d.efficiency.x:
        i = d.efficiency.x.index(d.recommended)
        ax.plot([d.recommended], [d.efficiency.y[i]], "*", c="gold", markersize=16,
                markeredgecolor="k", label="recommended", zorder=3)
    _gpu_axis(ax, d)
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 112)
    _legend_below(ax, *ax.get_legend_handles_labels())


def _time_panel(ax, d: PlotData) -> None:
    ax.plot(d.right.x, d.right.y, "s-", c="C2", label=d.right_label)
    _label_points(ax, d.right, "C2", 7)
    ax.set_ylabel(d.right_label)
    ax.set_ylim(0, 1.2 * max(d.right.y, default=1))
    _mark_misfits(ax, d)
    handles, labels = ax.get_legend_handles_labels()
    if d.cost is not None:
        twin = ax.twinx()
        twin.plot(d.cost.x, d.cost.y, "D:", c="C3", label="cost (USD)")
        _label_points(twin, d.cost, "C3", -12)
        twin.set_ylabel("cost (USD)")
        twin.set_ylim(0, 1.2 * max(d.cost.y, default=1))
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    _gpu_axis(ax, d)
    _legend_below(ax, handles, labels)
