"""docs/benchmarks.md's tables, each from the kept JSON of the script that measures it
(bench/report_doc.py keeps the results and writes the doc). Pure: a result in, Markdown
out; tests/unit/test_bench_report_doc.py checks them on made-up results.

Every block starts with the line that says where and how its figures were measured
(`conditions`), so a table never travels without its machine and load. The M3-M5 tables
of bench/comm.py are in bench/doc_tables_comm.py.
"""
import statistics

from bench import common, input_pipeline, scaling_report


def markdown(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def host(machine: dict) -> str:
    """'AMD EPYC, 2 CPUs, AVX-512': the CPU, its count, its widest vector unit."""
    flags = machine.get("Flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{machine.get('Model name', 'unknown CPU')}, {machine.get('cpus', '?')} CPUs, {vector}"


def conditions(r: dict, label: str = "", extra: str = "") -> str:
    """'*AMD EPYC, 2 CPUs, AVX2; the full version; load 0.7 -> 2.2 (1-minute average);
    326 s.*': where and how a result was measured (label: which run; extra: repeats)."""
    before, after = (r.get(k) or ["?"] for k in ("load_before", "load_after"))
    parts = [f"{label}: {host(r.get('machine', {}))}" if label else host(r.get("machine", {})),
             "the `--short` version" if r.get("short") else "the full version", extra,
             f"load {before[0]} -> {after[0]} (1-minute average)", f"{r.get('seconds', 0):,.0f} s"]
    return "*" + "; ".join(p for p in parts if p) + ".*"


def ranged(value: float, bounds, digits: int = 3) -> str:
    return f"{value:.{digits}f} ({bounds[0]:.{digits}f}-{bounds[1]:.{digits}f})"


def pct(x: float, sign: bool = False) -> str:
    return f"{100 * x:+.0f}%" if sign else f"{100 * x:.0f}%"


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


# --- M1 ------------------------------------------------------------------------------

M1_ROWS = {"ours": "ours (horovod_train, local)", "keras_fit": "plain Keras model.fit",
           "keras_fit_pooled": "model.fit with our CPU allocator choice"}


def m1_overhead(r: dict) -> str:
    rows, means = [], {}
    for name, label in M1_ROWS.items():
        means[name] = [statistics.fmean(run["per_rank"]) for run in r["runs"][name]]
        mean, ci = common.mean_ci(r["merged"][name]["per_rank"])
        rows.append([label, ", ".join(f"{x:.0f}" for x in means[name]), f"{mean:.1f} +- {ci:.1f}"])
    table = markdown(["run", "img/s per round", "img/s (mean +- 1.96 sd over log intervals)"],
                     rows)
    # Step time is the inverse of img/s: ours / fit in step time = fit's rate / ours.
    rounds = ", ".join(f"{fit / ours:.2f}" for ours, fit in zip(means["ours"], means["keras_fit"]))
    ratio, pooled, target = r["step_time_ratio"], r["step_time_ratio_pooled"], r["target"]
    return "\n".join([conditions(r, extra=f"{len(means['ours'])} interleaved rounds"), "", table,
                      "", f"Step time ours / fit = **{ratio:.3f}**, {verdict(ratio <= target)} "
                      f"(round by round {rounds}); ours / fit with the same allocator = "
                      f"{pooled:.3f}, {verdict(pooled <= target)}; target <= {target:g}."])


# --- M2 ------------------------------------------------------------------------------

M2_ROWS = {"ours/gloo": "**ours, Gloo**", "ours/mpi": "**ours, MPI**",
           "bare/gloo": "bare Horovod loop, Gloo", "bare/mpi": "bare Horovod loop, MPI",
           "mwms": "ours, mwms (vs ours, 1 rank)",
           "ours/gloo/bucket4": "ours, Gloo, `--allreduce_bucket_mb=4`",
           "ceiling": "ceiling: 2 processes, no communication"}
ONE_RANK = {"ours/1": "ours", "bare/1": "bare Horovod loop", "solo/1": "ours with `--backend=local`"}


def efficiency_cells(e: dict) -> list:
    return [ranged(e["wall"], e["wall_range"]), ranged(e["cpu"], e["cpu_range"]),
            pct(e["work"]), pct(e["extra_cpu"], sign=True), pct(e["waiting"], sign=True)]


def one_rank_line(reps: list) -> str:
    parts = []
    for run, label in ONE_RANK.items():
        if run in reps[0]:
            rates = [rep[run]["rate"] for rep in reps]
            spread = f" ({min(rates):.2f}-{max(rates):.2f})" if len(rates) > 1 else ""
            parts.append(f"{label} {statistics.fmean(rates):.2f} img/s{spread}")
    return "1 rank: " + ", ".join(parts) + "."


def repeats_and_load(figs: list) -> str:
    """'2 interleaved repeats; load 1.4-6.9 after its runs': the run's own start and end
    say little of a figure whose runs each took minutes, their loads say more."""
    loads = [run["load_after"][0] for fig in figs for rep in fig["runs"] for run in rep.values()
             if run.get("load_after")]
    spread = f"; load {min(loads):g}-{max(loads):g} after its runs" if loads else ""
    return f"{len(figs[0]['runs'])} interleaved repeats{spread}"


def m2_efficiency(r: dict, model: str) -> str:
    """Efficiency of every 2-rank run of `model` against its 1-rank run, and the split."""
    fig = r["models"][model]
    eff = fig["efficiency"]
    rows = [[label, *efficiency_cells(eff[key])] for key, label in M2_ROWS.items() if key in eff]
    table = markdown(["run", "wall efficiency (range)", "CPU efficiency (range)", "1-rank work",
                      "extra CPU", "waiting"], rows)
    return "\n".join([conditions(r, extra=repeats_and_load([fig])), "", table,
                      "", one_rank_line(fig["runs"])])


def m2_overlap(r: dict, model: str) -> str:
    """Gradient buckets during backprop against one grouped call after it (same repeats)."""
    fig = r["models"][model]
    eff = fig["efficiency"]
    arms = scaling_report.overlap_arms(eff)
    rows = []
    for label, key, run in arms:
        share = fig["comm_share"].get(run)
        rate = statistics.fmean(rep[run]["rate"] for rep in fig["runs"])
        rows.append([f"`{label}`" if label.startswith("--") else label,
                     ranged(eff[key]["wall"], eff[key]["wall_range"]),
                     ranged(eff[key]["cpu"], eff[key]["cpu_range"]),
                     pct(eff[key]["waiting"], sign=True),
                     pct(share) if share is not None else "-", f"{fig['batch'] / rate:.2f}"])
    (_, buckets, _), (_, one_call, _) = arms
    table = markdown(["`--allreduce_bucket_mb`", "wall efficiency (range)",
                      "CPU efficiency (range)", "waiting", "exposed comm share", "s/step"], rows)
    ratio = (f"Buckets / one call: x{common.ratio(eff[buckets]['wall'], eff[one_call]['wall']):.3f}"
             f" in wall clock, x{common.ratio(eff[buckets]['cpu'], eff[one_call]['cpu']):.3f} "
             "in CPU.")
    return "\n".join([conditions(r, extra=repeats_and_load([fig])), "", table, "", ratio])


def m2_binding(r: dict) -> str:
    """Ranks bound each to its own core (the default) against unbound, ours under Gloo."""
    rows = []
    for model, fig in r["models"].items():
        eff = fig["efficiency"]
        if "ours/gloo/unbound" not in eff:
            continue
        bound, free = eff["ours/gloo"], eff["ours/gloo/unbound"]
        rows.append([model, ranged(bound["wall"], bound["wall_range"]),
                     ranged(free["wall"], free["wall_range"]),
                     f"x{common.ratio(bound['wall'], free['wall']):.3f}",
                     f"{bound['cpu']:.3f} / {free['cpu']:.3f}"])
    extra = repeats_and_load(list(r["models"].values()))
    return "\n".join([conditions(r, extra=extra), "", markdown(
        ["model", "bound: wall efficiency (range)", "unbound (range)", "bound / unbound",
         "CPU efficiency bound / unbound"], rows)])


# --- M6 ------------------------------------------------------------------------------

def m6_input(r: dict) -> str:
    rows = [[c["case"], f"{c['pipeline']:,.0f}", f"{c['consumer']:,.0f}",
             f"{c['headroom']:.1f}x", f"{100 * c['data_wait']:.1f}%",
             f"{100 * c['floor_wait']:.1f}%"] for c in r["cases"]]
    return "\n".join([conditions(r), "", markdown(
        ["case", "pipeline ex/s", "consumer ex/s", "headroom", "data wait", "floor"], rows)])


def m6_ab(r: dict) -> str:
    """An A/B run of input_pipeline.py (--ab N): per variant, each column's median [min, max]."""
    columns = [c for c in input_pipeline.AB_COLUMNS if c[0] in r["cases"][0] and c[0] != "load"]
    rows = []
    for variant in dict.fromkeys(c["variant"] for c in r["cases"]):
        mine = [c for c in r["cases"] if c["variant"] == variant]
        cells = [variant, len(mine)]
        for key, scale, fmt, _ in columns:
            values = [scale * c[key] for c in mine]
            cells.append(f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, "
                         f"{fmt.format(max(values))}]")
        rows.append(cells)
    headers = ["variant", "runs"] + [f"{header}, median [min, max]" for *_, header in columns]
    return "\n".join([conditions(r), "", markdown(headers, rows)])


# --- XLA, start-up and memory ----------------------------------------------------------

def xla(r: dict) -> str:
    rows = [[x["model"], x["batch"], f"{1e3 * x['plain_s']:.1f}", f"{1e3 * x['xla_s']:.1f}",
             f"{x['ratio']:.2f}"] for x in r["models"]]
    return "\n".join([conditions(r), "", markdown(
        ["model", "batch", "plain ms/step", "xla ms/step", "xla / plain"], rows)])


def epochs_memory(r: dict) -> str:
    """Every run of both arms, round by round, and the worst rank's ratios."""
    rows = []
    for name, runs in r["arms"].items():
        for round_, run in enumerate(runs, 1):
            rows.append([round_, f"`--{name}`", f"{run['steps']:,}",
                         " / ".join(f"{v:.1f}" for v in run["first_step_s"]),
                         " / ".join(f"{v:.0f}" for v in run["peak_rss_mb"]),
                         f"{run['wall_s']:.1f}"])
    rows.sort(key=lambda row: row[0])  # the order they ran in: alternating
    verdicts = [[what, f"{r[key]:.3f}", f"<= {r['target']:g}", verdict(r[key] <= r["target"])]
                for key, what in (("rss_ratio", "peak RSS"), ("first_step_ratio", "first step"))]
    return "\n".join([
        conditions(r), "",
        markdown(["round", "arm", "steps", "first step, s (each rank)",
                  "peak RSS, MiB (each rank)", "wall of the run, s"], rows), "",
        markdown(["many epochs / one, worst rank", "ratio", "target", "verdict"], verdicts)])


# --- The divergence guards and the GradientTape API ----------------------------------

# A weight checksum of millions of floats takes milliseconds; a check timed under this
# never ran (divergence.check returns early without peers), so its verdict is void.
VOID_CHECK_S = 1e-5


def divergence_overhead(r: dict) -> str:
    """The trainer's cross-rank weight check against its step, one process."""
    rows = [[x["model"], f"{x['params']:,}", x["batch"], f"{1e3 * x['step_s']:.1f}",
             f"{1e3 * x['check_s']:.3f}", x["steps_per_epoch"], f"{x['epoch_ratio']:.5f}",
             x["steps_for_1pct"]] for x in r["models"]]
    worst = max(x["epoch_ratio"] for x in r["models"])
    lines = [conditions(r, extra=f"medians of {r['rounds']} alternating rounds"), "",
             markdown(["model", "trainable weights", "batch", "step ms", "check ms",
                       f"steps/epoch ({r['ranks']} ranks)", "epoch with / without the check",
                       "smallest `--divergence_check_steps` within 1%"], rows), ""]
    void = [x["model"] for x in r["models"] if x["check_s"] < VOID_CHECK_S]
    if void:
        lines.append(f"**Void**: the check of {', '.join(void)} took under "
                     f"{1e6 * VOID_CHECK_S:g} us, so it did not run (no peers to compare "
                     f"with); this result says nothing of its cost.")
    else:
        lines.append(f"Epoch ends (the default), worst model: {worst:.5f}, "
                     f"{verdict(worst <= r['target'])}; target <= {r['target']:g}.")
    return "\n".join(lines)


def keras_guard_overhead(r: dict) -> str:
    """The Keras drop-in's guard on 2 ranks: its parts, and their cost at the defaults."""
    rows = [[x["model"], f"{x['step_ms']:.1f}", f"{x['in_step_check_ms']:.2f}",
             f"{x['epoch_check_ms']:.1f}", x["steps_per_epoch"], f"{100 * x['overhead']:.3f}%"]
            for x in r["rows"]]
    worst = max(x["overhead"] for x in r["rows"])
    return "\n".join([conditions(r), "", markdown(
        ["model", "step ms", "in-step check ms (every update)", "epoch-end check ms",
         "steps/epoch", "overhead at the defaults"], rows), "",
        f"Worst model: {100 * worst:.3f}% of step time, {verdict(worst <= r['target'])}; "
        f"target <= {100 * r['target']:g}%."])


def tape_overhead(r: dict) -> str:
    """hvd.DistributedGradientTape (ours) against a hand-written grouped_allreduce."""
    rows = [[x["model"], x["controller"], x["buckets"], f"{x['tape_ms']:.1f}",
             f"{x['hand_ms']:.1f}", f"{x['ratio']:.3f}",
             f"{min(x['round_ratios']):.2f}-{max(x['round_ratios']):.2f}",
             verdict(x["ratio"] <= r["target"])] for x in r["rows"]]
    return "\n".join([conditions(r), "", markdown(
        ["model", "controller", "our gradient buckets", "ours ms/step", "hand-written ms/step",
         "ours / hand-written", "per round (rank 0)", f"<= {r['target']:g}"], rows)])


def startup(r: dict) -> str:
    """The time to the first step, ours against plain Keras model.fit, by phase."""
    from horovod_train.startup import KEYS  # TF-free: the phases in the order they run

    def phases(p):
        return ", ".join(f"{k} {p[k]:.2f}" for k in KEYS if k in p)
    rows = [[c["case"], f"{min(c['ours_s']):.2f}-{max(c['ours_s']):.2f}",
             f"{min(c['keras_s']):.2f}-{max(c['keras_s']):.2f}", f"{c['ratio']:.3f}",
             phases(c["ours_phases"]), phases(c["keras_phases"]),
             verdict(c["ratio"] <= r["target"])] for c in r["cases"]]
    return "\n".join([conditions(r), "", markdown(
        ["case", "ours s", "Keras s", "ours / Keras (medians)", "ours by phase, s",
         "Keras by phase, s", f"<= {r['target']:g}"], rows)])
