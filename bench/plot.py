"""docs/benchmarks.png from the figures' JSON files (matplotlib, Agg: no display).

  python bench/plot.py [--in_dir runs/bench] [--out docs/benchmarks.png]

A panel per figure that is present; missing JSON files leave their panels out. Each
panel has one unit per axis, efficiencies in percent, every bar or point labelled
with its value, and its target marked met or missed (in the title, and on each bar
the target applies to). The labelling rules are horovod_train/observe/plots.py's.
"""
import argparse
import functools
import json
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import comm, common, input_pipeline, scaling_report  # noqa: E402

# M5: one allreduce per optimizer step, whatever the number of micro-batches.
VERDICT_COLORS = {"met": "tab:green", "missed": "tab:red"}
OURS, OTHERS = "tab:blue", "tab:gray"


def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def times_label(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def ms_label(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms" if seconds < 0.1 else f"{1e3 * seconds:.0f} ms"


def _load(in_dir: str, name: str):
    path = os.path.join(in_dir, f"{name}.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _title(ax, what: str, target: str | None = None, ok: bool | None = None):
    """The panel's title; with a target, a second line 'target ...: met|missed' in the
    verdict's colour."""
    if target is None:
        ax.set_title(what)
        return
    ax.set_title(f"{what}\ntarget {target}: {verdict(ok)}", color=VERDICT_COLORS[verdict(ok)])


def _target_line(ax, y: float, text: str):
    """A dashed target line, named just right of the axes (never over the data)."""
    ax.axhline(y, color="tab:red", ls="--", lw=1.2)
    ax.annotate(text, (1.01, y), xycoords=ax.get_yaxis_transform(), va="center",
                color="tab:red", annotation_clip=False)


def _bars(ax, labels, values, texts, colors, errors=None, ylabel=""):
    """Bars with their value written above each (above its error bar, if any) and
    their names wrapped under them, level, so that neighbours never run together."""
    bars = ax.bar(range(len(values)), values, yerr=errors, capsize=3, color=colors)
    label_colors = [c if c in VERDICT_COLORS.values() else "black" for c in colors]
    tops = [v + e for v, e in zip(values, errors)] if errors else values
    for bar, top, text, color in zip(bars, tops, texts, label_colors):
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, top),
                    textcoords="offset points", xytext=(0, 3), ha="center", color=color)
    width = max(6, 56 // len(values))  # characters that fit under one bar at 10 pt
    ax.set_xticks(range(len(values)), [textwrap.fill(label, width) for label in labels])
    ax.set_ylabel(ylabel)
    return bars


def _verdict_colors(oks):
    """Bar colours: a bar a target applies to shows its verdict; others are plain."""
    return [OTHERS if ok is None else VERDICT_COLORS[verdict(ok)] for ok in oks]


def m1(ax, r):
    stats = {k: common.mean_ci(r["merged"][k]["per_rank"]) for k in ("ours", "keras_fit")}
    target, ratio = r["target"], r["step_time_ratio"]
    ok = ratio <= target
    _bars(ax, ["ours", "Keras fit"], [s[0] for s in stats.values()],
          [f"{s[0]:.0f}" for s in stats.values()], [VERDICT_COLORS[verdict(ok)], OTHERS],
          errors=[s[1] for s in stats.values()], ylabel="img/s (1 rank x 1 thread)")
    # Step time ours / fit <= target  <=>  ours' img/s >= fit's / target.
    _target_line(ax, stats["keras_fit"][0] / target, f"fit / {target:g}")
    ax.set_ylim(0, 1.25 * max(s[0] + s[1] for s in stats.values()))
    _title(ax, f"M1 overhead over Keras fit: step time ours / fit = {ratio:.2f}",
           f"<= {target:g}", ok)


M2_KEYS = ("ours/gloo", "bare/gloo", "ours/mpi", "bare/mpi", "mwms")
M2_LABELS = ("ours Gloo", "bare hvd Gloo", "ours MPI", "bare hvd MPI", "ours mwms")
CPU_BARS = "tab:olive"


def m2_models(r) -> dict:
    """model -> {"wall": {key: efficiency}, "cpu": {key: efficiency} or None, "target"}
    from bench/scaling.py's JSON; an older file (one model, wall clock only) too."""
    if "models" not in r:
        return {"digits_cnn": {"wall": r["efficiency"], "cpu": None, "target": r["target"]}}
    return {name: {"wall": {k: e["wall"] for k, e in fig["efficiency"].items()},
                   "cpu": {k: e["cpu"] for k, e in fig["efficiency"].items()},
                   "target": fig["target"]} for name, fig in r["models"].items()}


def _pair_bars(ax, labels, wall, cpu, wall_texts, wall_colors):
    """Wall-clock bars (coloured by verdict) with hatched CPU-efficiency bars beside
    them, each labelled upright above itself so that neighbours never run together; the
    x label says which is which (a legend outside would narrow every panel)."""
    width = 0.4 if cpu else 0.8
    xs = [i - (width / 2 if cpu else 0) for i in range(len(wall))]
    series = [(xs, wall, wall_texts, wall_colors, None)]
    if cpu:
        series.append(([x + width for x in xs], cpu, [f"{v:.0f}% CPU" for v in cpu],
                       [CPU_BARS] * len(cpu), "//"))
        ax.set_xlabel("solid: wall clock; hatched: CPU-s per image")
    for x, values, texts, colors, hatch in series:
        bars = ax.bar(x, values, width, color=colors, hatch=hatch)
        for bar, text in zip(bars, texts):
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        textcoords="offset points", xytext=(0, 3), ha="center", va="bottom",
                        rotation=90, color=bar.get_facecolor() if text.endswith("missed")
                        else "black")
    ax.set_xticks(range(len(wall)), [textwrap.fill(t, max(6, 56 // len(wall))) for t in labels])
    ax.set_ylabel("efficiency (%)")
    ax.set_ylim(0, 1.5 * max(100, *wall, *(cpu or ())))


def m2(ax, r, model=None):
    figs = m2_models(r)
    fig = figs[model or next(iter(figs))]
    eff, target = fig["wall"], fig["target"]
    oks = [eff[k] >= target if k.startswith("ours/") else None for k in M2_KEYS]
    texts = [f"{100 * eff[k]:.0f}%" + (f" {verdict(ok)}" if ok is not None else "")
             for k, ok in zip(M2_KEYS, oks)]
    cpu = [100 * fig["cpu"][k] for k in M2_KEYS] if fig["cpu"] else None
    _pair_bars(ax, M2_LABELS, [100 * eff[k] for k in M2_KEYS], cpu, texts, _verdict_colors(oks))
    _target_line(ax, 100 * target, f"{100 * target:.0f}%")
    _title(ax, f"M2 {model or next(iter(figs))}: efficiency, 2 ranks / 1 rank",
           f"ours >= {100 * target:.0f}% (wall)", all(ok for ok in oks if ok is not None))


def m2_overlap(ax, r):
    """Gradient buckets during backprop vs one allreduce after it (ours, Gloo)."""
    name, fig = next((n, f) for n, f in r["models"].items()
                     if scaling_report.overlap_arms(f["efficiency"]))
    arms = scaling_report.overlap_arms(fig["efficiency"])
    effs = [fig["efficiency"][key] for _, key, _ in arms]
    shares = [fig.get("comm_share", {}).get(run) for _, _, run in arms]
    _pair_bars(ax, ["4 MiB buckets", "one call after backprop"],
               [100 * e["wall"] for e in effs], [100 * e["cpu"] for e in effs],
               [f"{100 * e['wall']:.0f}%" for e in effs], [OURS, OTHERS])
    comm = ", ".join("-" if s is None else f"{100 * s:.0f}%" for s in shares)
    _title(ax, f"M2 overlap, {name}, ours Gloo: --allreduce_bucket_mb\n"
               f"logged comm share {comm}")


def _m2_panels(r) -> list:
    panels = [functools.partial(m2, model=name) for name in m2_models(r)]
    if any(scaling_report.overlap_arms(f["efficiency"]) for f in r.get("models", {}).values()):
        panels.append(m2_overlap)
    return panels


def m3(ax, r):
    from horovod_train.observe import plots
    sizes = [x["bytes"] for x in r["m3"]]
    ax.loglog(sizes, [x["ours_busbw"] for x in r["m3"]], "o-", color=OURS,
              label="ours (allreduce_gradients)")
    alone = all("bare_mpi4py_busbw" in x for x in r["m3"])  # files from issue 23 on
    if alone:
        ax.loglog(sizes, [x["bare_mpi4py_busbw"] for x in r["m3"]], "s-", color=OTHERS,
                  label="mpi4py Allreduce, alone")
    ax.loglog(sizes, [x["mpi4py_busbw"] for x in r["m3"]], "s--", color=OTHERS,
              label="mpi4py Allreduce, beside Horovod" if alone else "mpi4py Allreduce")
    ax.set_xticks(sizes, [common.size_label(s) for s in sizes], rotation=30, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("allreduce size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    big = [x for x in r["m3"] if x["bytes"] >= comm.M3_FROM]
    for x in big:  # where the target applies: ours / mpi4py at each size
        ax.annotate(f"{x['ratio']:.2f}x mpi4py", (x["bytes"], x["ours_busbw"]),
                    textcoords="offset points", xytext=(-6, -16), ha="right")
    plots.legend_outside(ax)
    worst = min((x["ratio"] for x in big), default=math.nan)
    _title(ax, "M3 allreduce bus bandwidth, 2 ranks, MPI",
           f"ours / mpi4py >= {comm.M3_TARGET:g} from {common.size_label(comm.M3_FROM)} "
           f"(here {worst:.2f})",
           bool(big) and worst >= comm.M3_TARGET)


def m4(ax, r):
    secs = {**r["m4"]["seconds"],
            **{f"{k}, alone": v for k, v in r["m4"].get("bare_seconds", {}).items()}}
    _bars(ax, list(secs), [1e3 * v for v in secs.values()], [ms_label(v) for v in secs.values()],
          [OURS if "ours" in k else OTHERS for k in secs], ylabel="ms per allreduce of all")
    ax.set_yscale("log")
    ax.set_ylim(top=4 * 1e3 * max(secs.values()))
    _title(ax, f"M4 {r['m4']['tensors']} small tensors: fusion gain "
               f"{times_label(r['m4']['fusion_gain'])} (eager per tensor / grouped)")


def m5_efficiency(ax, r):
    from horovod_train.observe import plots
    ks = [x["k"] for x in r["m5"]]
    effs = [100 * x["efficiency"] for x in r["m5"]]
    ax.plot(ks, effs, "o-", color=OURS, label="wall clock")
    plots.label_points(ax, ks, effs, [f"{e:.0f}%" for e in effs])
    cpu = [100 * x["cpu_efficiency"] for x in r["m5"] if "cpu_efficiency" in x]
    if len(cpu) == len(ks):  # issue 23's files: CPU-s per image too, labelled below
        ax.plot(ks, cpu, "s--", color=CPU_BARS, label="CPU-s per image")
        plots.label_points(ax, ks, cpu, [f"{c:.0f}%" for c in cpu], offset=(0, -16))
        plots.legend_outside(ax)
    ax.axhline(100, color=OTHERS, ls=":")
    ax.set_ylim(0, 1.2 * max(100, *effs, *cpu))
    _k_axis(ax, ks)
    ax.set_ylabel("efficiency (%)")
    _title(ax, "M5 accumulation, 2 ranks: step with allreduce / without")


def m5_ops(ax, r):
    # One reduction per optimizer step whatever k: as many collectives as k = 1 has
    # (its gradient buckets, --allreduce_bucket_mb), never more with accumulation.
    ks = [x["k"] for x in r["m5"]]
    ops = [x["collective_ops_per_step"] for x in r["m5"]]
    target = ops[0]
    oks = [n == target for n in ops]
    _bars(ax, [str(k) for k in ks], ops, [f"{n} {verdict(ok)}" for n, ok in zip(ops, oks)],
          _verdict_colors(oks), ylabel="allreduce ops per optimizer step")
    ax.set_xlabel("accumulation steps k")
    ax.set_ylim(0, 1.5 * max(ops))
    _target_line(ax, target, str(target))
    _title(ax, "M5 allreduce ops per optimizer step", f"{target} (k = 1's buckets) for every k",
           all(oks))


def _k_axis(ax, ks):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("accumulation steps k")


def _case(c) -> str:
    return c["case"].split(" -> ")[0]


def m6_headroom(ax, r):
    target = input_pipeline.TARGET_HEADROOM
    values = [c["headroom"] for c in r["cases"]]
    oks = [v >= target for v in values]
    _bars(ax, [_case(c) for c in r["cases"]], values,
          [f"{times_label(v)} {verdict(ok)}" for v, ok in zip(values, oks)],
          _verdict_colors(oks), ylabel="pipeline / consumer (x)")
    _target_line(ax, target, times_label(target))
    ax.set_ylim(0, 1.2 * max(*values, target))
    _title(ax, "M6 input-pipeline headroom", f">= {times_label(target)}", all(oks))


def m6_wait(ax, r):
    target = input_pipeline.TARGET_WAIT
    values = [100 * c["data_wait"] for c in r["cases"]]
    oks = [v < 100 * target for v in values]
    _bars(ax, [_case(c) for c in r["cases"]], values,
          [f"{v:.1f}% {verdict(ok)}" for v, ok in zip(values, oks)], _verdict_colors(oks),
          ylabel="data wait (% of wall time)")
    _target_line(ax, 100 * target, f"{100 * target:g}%")
    ax.set_ylim(0, 1.25 * max(*values, 100 * target))
    _title(ax, f"M6 data wait: met for {sum(oks)} of {len(oks)}", f"< {100 * target:g}%",
           all(oks))


# A file's panels: one function, or (for M2) a function of the data listing them.
PANELS = (("m1_overhead", m1), ("m2_scaling", _m2_panels), ("comm", m3), ("comm", m4),
          ("comm", m5_efficiency), ("comm", m5_ops), ("m6_input", m6_headroom),
          ("m6_input", m6_wait))
COLUMNS = 2


def figure(in_dir: str):
    """The figure of every panel whose JSON is in in_dir, or None when there is none."""
    from horovod_train.observe import plots
    import matplotlib.pyplot as plt
    present = [(panel, data) for name, fn in PANELS if (data := _load(in_dir, name)) is not None
               for panel in (fn(data) if fn is _m2_panels else [fn])]
    if not present:
        return None
    rows = -(-len(present) // COLUMNS)
    with plt.rc_context(plots.STYLE):
        fig, axes = plt.subplots(rows, COLUMNS, figsize=(6.4 * COLUMNS, 4.4 * rows),
                                 squeeze=False)
        for ax in axes.flat[len(present):]:
            ax.axis("off")
        for ax, (fn, data) in zip(axes.flat, present):
            fn(ax, data)
            ax.grid(alpha=0.3, axis="y")
        fig.tight_layout(h_pad=2.0, w_pad=3.0)
    return fig


def plot(in_dir: str, out: str) -> str:
    from horovod_train.observe import plots
    fig = figure(in_dir)
    if fig is None:
        return f"nothing to plot in {in_dir}"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    return plots.save(fig, out, dpi=90)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in_dir", default=common.OUT_DIR)
    parser.add_argument("--out", default=os.path.join(common.ROOT, "docs", "benchmarks.png"))
    args = parser.parse_args(argv)
    print(plot(args.in_dir, args.out))


if __name__ == "__main__":
    main()
