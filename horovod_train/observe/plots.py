"""The report's PNGs (matplotlib, Agg: no display needed).

Each public function writes one PNG and returns its path; the *_figure functions build
the figure (what the tests inspect). The labelling rules live here and bench/plot.py
uses them too: text of at least 9 pt, legends outside the axes (never on the data),
"1 rank" / "2 ranks", efficiency in percent, every scaling point labelled.
"""
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from horovod_train import fs  # noqa: E402
from horovod_train.observe.observer import traced  # noqa: E402

COLORS = {"data": "tab:orange", "compute": "tab:blue", "comm": "tab:red",
          "optimizer": "tab:green", "step": "tab:purple", "sync": "tab:pink",
          "divergence": "tab:olive", "other": "tab:gray"}
MIN_FONT_PT = 9
# Every text size set explicitly: matplotlib's "small" (8.3 pt) is below the floor.
STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 12}
TRACED = "includes tracing"


def ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def percent(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def rate_label(samples_per_sec: float) -> str:
    return f"{samples_per_sec:,.0f}/s"


def label_points(ax, xs, ys, labels, offset=(0, 7)):
    """Writes each point's label just above it."""
    for x, y, text in zip(xs, ys, labels):
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, ha="center",
                    fontsize=STYLE["font.size"])


def legend_outside(ax, **kwargs):
    """The legend right of the axes, so it never covers a point or a bar."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def save(fig, path: str, dpi: int = 100) -> str:
    """Renders in memory, then writes aside and renames (fs.write_atomic): a link planted
    at `path` is replaced, never written through, and no reader sees half a PNG."""
    buffer = io.BytesIO()
    # "tight" keeps the legends placed outside the axes inside the image.
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    fs.write_atomic(path, buffer.getvalue())
    return path


def throughput_figure(runs):
    """Total samples/s per interval against wall time, one line per run; intervals that
    traced (compile time, not throughput) drawn as crosses."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8, 4))
        for run in runs:
            xs = [r.get("time_s", r["step"]) for r in run.train]
            ys = [r["samples_per_sec"] for r in run.train]
            line, = ax.plot(xs, ys, marker=".", label=f"{run.name} ({ranks(run.world_size)})")
            marks = [(x, y) for i, (x, y, r) in enumerate(zip(xs, ys, run.train))
                     if traced(r, i)]
            if marks:
                ax.plot(*zip(*marks), "x", color=line.get_color(), markersize=9,
                        label=f"{run.name}: {TRACED}")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("samples/s (all ranks)")
        ax.set_title("Throughput over time")
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return fig


def throughput(runs, path: str) -> str:
    return save(throughput_figure(runs), path)


def breakdown_figure(run):
    """Milliseconds per step of each part, stacked, per logging interval: each interval's
    value is drawn flat over the steps it covers (after the previous interval's last step,
    up to its own), so a part measured in one interval only (a divergence check) stands
    over that interval's steps alone. The intervals that traced are shaded and left out of
    the axis range."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8, 4))
        steps = [r["step"] for r in run.train]
        parts = [p for p in COLORS if any(p in r["seconds_per_step"] for r in run.train)]
        stacks = [[1000 * r["seconds_per_step"].get(p, 0.0) for r in run.train] for p in parts]
        if steps:
            first = steps[0] - run.train[0].get("steps", steps[0])
            ax.stackplot([first] + steps, [[s[0]] + s for s in stacks], labels=parts,
                         colors=[COLORS[p] for p in parts], alpha=0.85, step="pre")
            totals = [sum(col) for col in zip(*stacks)]
            compiling = [i for i, r in enumerate(run.train) if traced(r, i)]
            for n, i in enumerate(compiling):
                ax.axvspan(steps[i - 1] if i else 0, steps[i], color="0.85", zorder=0,
                           label=TRACED if n == 0 else None)
            steady = [t for i, t in enumerate(totals) if i not in compiling] or totals
            ax.set_ylim(0, 1.3 * max(max(steady), 1e-3))
        ax.set_xlabel("step")
        ax.set_ylabel("ms per step")
        ax.set_title(f"Where the time goes: {run.name} ({ranks(run.world_size)})")
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return fig


def breakdown(run, path: str) -> str:
    return save(breakdown_figure(run), path)


def scaling_figure(points):
    """points: (world size, samples/s, efficiency or None, name), sorted by size."""
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
        sizes = [p[0] for p in points]
        rates = [p[1] for p in points]
        left.plot(sizes, rates, marker="o", label="measured")
        label_points(left, sizes, rates, [rate_label(r) for r in rates])
        one = [p[1] for p in points if p[0] == 1]
        top = max(rates)
        if one:
            left.plot(sizes, [one[0] * s for s in sizes], "--", color="gray",
                      label=f"linear from {ranks(1)}")
            top = max(top, one[0] * sizes[-1])
        left.set_ylim(0, 1.2 * top)  # room for the labels above the points
        left.set_xlabel("world size (ranks)")
        left.set_ylabel("samples/s (all ranks)")
        left.set_title("Throughput vs world size")
        legend_outside(left)
        effs = [(p[0], 100 * p[2]) for p in points if p[2] is not None]
        if effs:
            right.plot(*zip(*effs), marker="o")
            label_points(right, *zip(*effs), [f"{e:.0f}%" for _, e in effs])
        right.axhline(100, color="gray", linestyle="--")
        right.set_ylim(0, 120)
        right.set_xlabel("world size (ranks)")
        right.set_ylabel("scaling efficiency (%)")
        right.set_title("Efficiency vs world size")
        for ax in (left, right):
            ax.set_xticks(sizes)
            ax.grid(alpha=0.3)
        fig.tight_layout()
    return fig


def scaling(points, path: str) -> str:
    return save(scaling_figure(points), path)
