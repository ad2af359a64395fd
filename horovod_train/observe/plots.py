"""The report's PNGs (matplotlib, Agg: no display needed). Each function returns the
path it wrote."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

COLORS = {"data": "tab:orange", "compute": "tab:blue", "comm": "tab:red",
          "optimizer": "tab:green", "step": "tab:purple", "sync": "tab:pink",
          "guard": "tab:olive", "other": "tab:gray"}


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def throughput(runs, path: str) -> str:
    """Total samples/s per interval against wall time, one line per run."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        train = run.train
        ax.plot([r.get("time_s", r["step"]) for r in train],
                [r["samples_per_sec"] for r in train], marker=".",
                label=f"{run.name} ({run.world_size} ranks)")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("samples/s (all ranks)")
    ax.set_title("Throughput over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def breakdown(run, path: str) -> str:
    """Milliseconds per step of each part, stacked, per logging interval."""
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in run.train]
    parts = [p for p in COLORS if any(p in r["seconds_per_step"] for r in run.train)]
    stacks = [[1000 * r["seconds_per_step"].get(p, 0.0) for r in run.train] for p in parts]
    if steps:
        ax.stackplot(steps, stacks, labels=parts, colors=[COLORS[p] for p in parts], alpha=0.85)
        # The first interval holds tracing: cap the axis at the steady-state range.
        steady = [sum(col) for col in zip(*stacks)][1:] or [1.0]
        ax.set_ylim(0, 1.3 * max(steady))
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step")
    ax.set_title(f"Where the time goes: {run.name} ({run.world_size} ranks)")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def scaling(points, path: str) -> str:
    """points: (world size, samples/s, efficiency or None, name), sorted by size."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [p[0] for p in points]
    left.plot(sizes, [p[1] for p in points], marker="o", label="measured")
    one = [p[1] for p in points if p[0] == 1]
    if one:
        left.plot(sizes, [one[0] * s for s in sizes], "--", color="gray", label="linear")
    left.set_xlabel("world size (ranks)")
    left.set_ylabel("samples/s (all ranks)")
    left.set_title("Throughput vs world size")
    left.legend(fontsize="small")
    effs = [(p[0], 100 * p[2]) for p in points if p[2] is not None]
    if effs:
        right.plot(*zip(*effs), marker="o")
    right.axhline(100, color="gray", linestyle="--")
    right.set_ylim(0, 110)
    right.set_xlabel("world size (ranks)")
    right.set_ylabel("scaling efficiency %")
    right.set_title("Efficiency vs world size")
    for ax in (left, right):
        ax.set_xticks(sizes)
        ax.grid(alpha=0.3)
    return _save(fig, path)
