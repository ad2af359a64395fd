"""The printed M2 report (bench/scaling.py's JSON -> tables): pure, no processes, so
tests/unit/test_bench_scaling.py checks it on real numbers."""
import statistics

from bench import common

ORDER = ("ours/1", "bare/1", "solo/1", "ours/2/gloo", "bare/2/gloo", "ours/2/mpi", "bare/2/mpi",
         "mwms/2", "ours/2/gloo/bucket4", "ours/2/gloo/bucket0", "ours/2/gloo/unbound", "solo/2")
EFF_LABELS = {"ours/gloo": "ours, Gloo", "ours/mpi": "ours, MPI", "bare/gloo": "bare Horovod, Gloo",
              "bare/mpi": "bare Horovod, MPI", "mwms": "ours, mwms (vs ours 1 rank)",
              "ceiling": "no communication: 2 lone processes at once / 1 alone"}
RATE_HEADERS = ["run", "ranks", "img/s per rank", "range", "CPU ms/img", "range", "load after"]
EFF_HEADERS = ["2 ranks / 1 rank", "wall eff", "range", "CPU eff", "range", "1-rank work",
               "extra CPU", "waiting"]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def comm_share(reps: list, run: str):
    """Mean `comm N%` of run's logged intervals over the repeats (None when not logged)."""
    shares = [s for r in reps for s in r[run].get("comm_share", ()) if s == s]
    return statistics.fmean(shares) if shares else None


def rate_rows(reps: list, labels: dict) -> list:
    """One row per run: mean over repeats and the per-repeat min..max, wall and CPU."""
    rows = []
    for name in (n for n in ORDER if n in reps[0]):
        rates = [r[name]["rate"] for r in reps]
        cpus = [r[name]["cpu"] for r in reps if r[name]["cpu"] is not None]
        rows.append([labels.get(name, name), reps[0][name]["ranks"],
                     f"{statistics.fmean(rates):.2f}", common.fmt_range(rates),
                     f"{1e3 * statistics.fmean(cpus):.1f}" if cpus else "-",
                     common.fmt_range(cpus, scale=1e3, digits=1),
                     str(reps[-1][name].get("load_after", "-"))])
    return rows


def eff_row(label: str, e: dict) -> list:
    return [label, f"{e['wall']:.3f}", common.fmt_range(e["wall_range"], digits=3),
            f"{e['cpu']:.3f}", common.fmt_range(e["cpu_range"], digits=3), _pct(e["work"]),
            f"{100 * e['extra_cpu']:+.0f}%", f"{100 * e['waiting']:+.0f}%"]


def verdicts(fig: dict) -> str:
    """'target ours >= T (wall): Gloo 0.951 met, MPI 0.902 MISSED; by CPU: ...'."""
    t, eff = fig["target"], fig["efficiency"]
    present = [c for c in ("gloo", "mpi") if "ours/" + c in eff]
    if not present:
        return ""

    def say(kind):
        return ", ".join(f"{c.upper() if c != 'gloo' else 'Gloo'} {eff['ours/' + c][kind]:.3f} "
                         f"{'met' if eff['ours/' + c][kind] >= t else 'MISSED'}"
                         for c in present)
    return (f"target ours >= {t} (wall clock): {say('wall')}; "
            f"the same bar in CPU efficiency: {say('cpu')}")


def ceiling_line(eff: dict) -> str:
    """How much of the no-communication ceiling ours reaches (wall and CPU)."""
    if "ceiling" not in eff:
        return ""
    top = eff["ceiling"]
    parts = [f"{EFF_LABELS['ours/' + c]} / ceiling: wall x{common.ratio(eff['ours/' + c]['wall'], top['wall']):.3f}, "
             f"CPU x{common.ratio(eff['ours/' + c]['cpu'], top['cpu']):.3f}"
             for c in ("gloo", "mpi") if "ours/" + c in eff]
    return "; ".join([f"the ceiling here (2 processes that never communicate): wall "
                      f"{top['wall']:.3f}, CPU {top['cpu']:.3f}", *parts])


def model_section(model: str, fig: dict, r: dict, labels: dict) -> str:
    reps, eff = fig["runs"], fig["efficiency"]
    steady = fig["steps"] - fig["interval"]
    done = len(reps)
    fewer = (f" ({r['version']} version: fewer than the full version's {r['full_repeats']})"
             if done < r["full_repeats"] else "")
    if done < r["repeats"]:
        fewer += f"; a run cut short: {done} of the {r['repeats']} planned"
    lines = [
        f"M2 scaling: {model} 32x32x3, batch {fig['batch']} per rank, 1 thread per rank, "
        f"{fig['steps']} steps logged every {fig['interval']} (figures from the {steady} steps "
        f"after the first interval), {done} interleaved repeat(s){fewer}",
        common.table(RATE_HEADERS, rate_rows(reps, labels)), "",
        common.table(EFF_HEADERS, [eff_row(EFF_LABELS[k], eff[k]) for k in EFF_LABELS if k in eff]),
    ]
    lines += [f"{EFF_LABELS[k]}: {common.interpret(eff[k])}" for k in EFF_LABELS if k in eff]
    lines += [line for line in (verdicts(fig), ceiling_line(eff)) if line]
    if fig.get("horovod_over_mwms") is not None:
        lines.append(f"horovod (Gloo) / mwms throughput = {fig['horovod_over_mwms']:.2f}; ours "
                     f"logged its CPU-sharing defaults: {fig['ours_chose_defaults']}")
    return "\n".join(lines)


def overlap_arms(eff: dict) -> tuple | None:
    """((label, efficiency key, run key) of the buckets, the same of one call after
    backprop), or None without an overlap run. Since the Gloo default on shared CPU cores
    is one call, the buckets run with the flag given; earlier results (the default was
    buckets then) have an explicit 0 run instead."""
    if "ours/gloo/bucket4" in eff:
        return (("--allreduce_bucket_mb=4", "ours/gloo/bucket4", "ours/2/gloo/bucket4"),
                ("unset (default: one call)", "ours/gloo", "ours/2/gloo"))
    if "ours/gloo/bucket0" in eff:
        return (("--allreduce_bucket_mb=4 (default)", "ours/gloo", "ours/2/gloo"),
                ("--allreduce_bucket_mb=0", "ours/gloo/bucket0", "ours/2/gloo/bucket0"))
    return None


def overlap_section(model: str, fig: dict) -> str:
    """Buckets overlapping backprop (4 MiB) beside one grouped allreduce after the
    backward pass, from the same interleaved repeats."""
    reps, eff = fig["runs"], fig["efficiency"]
    arms = overlap_arms(eff)
    rows = []
    for label, key, run in arms:
        share, rate = comm_share(reps, run), statistics.fmean(r[run]["rate"] for r in reps)
        rows.append([*eff_row(label, eff[key])[:5], f"{100 * eff[key]['waiting']:+.0f}%",
                     _pct(share) if share is not None else "-", f"{fig['batch'] / rate:.2f}"])
    (_, with_buckets, _), (_, one_call, _) = arms
    gain = common.ratio(eff[with_buckets]["wall"], eff[one_call]["wall"])
    cpu_gain = common.ratio(eff[with_buckets]["cpu"], eff[one_call]["cpu"])
    return "\n".join([
        f"M2 overlap: {model}, ours, 2 ranks, Gloo; bucketed allreduce during backprop vs one "
        "grouped allreduce after it (interleaved in the same repeats)",
        common.table(["--allreduce_bucket_mb", "wall eff", "range", "CPU eff", "range", "waiting",
                      "comm share", "s/step"], rows),
        "comm share: the `comm N%` of our `train |` lines: the exposed allreduce, the mean "
        "step beyond the sampled compute and optimizer (metrics.split_step); what buckets "
        "hide is not in it; waiting: common.cost_split",
        f"buckets / one call: wall efficiency x{gain:.3f}, CPU efficiency x{cpu_gain:.3f} "
        f"({'buckets faster' if gain > 1 else 'buckets not faster'} in wall clock)",
    ])


def binding_section(models: dict) -> str:
    """Ranks bound to their share of the cores (the default) beside the same run unbound
    (HOROVOD_TRAIN_CPU_BIND=none), ours on Gloo, from the same interleaved repeats."""
    rows = []
    for model, fig in models.items():
        eff = fig["efficiency"]
        for label, key in (("bound (default)", "ours/gloo"), ("none", "ours/gloo/unbound")):
            rows.append([model, *eff_row(label, eff[key])[:5]])
        rows.append([model, "bound / none", f"x{common.ratio(eff['ours/gloo']['wall'], eff['ours/gloo/unbound']['wall']):.3f}",
                     "", f"x{common.ratio(eff['ours/gloo']['cpu'], eff['ours/gloo/unbound']['cpu']):.3f}", ""])
    return "\n".join([
        "M2 CPU binding: ours, 2 ranks, Gloo; each rank bound to its own core (the default) "
        "vs free to run on both (interleaved in the same repeats)",
        common.table(["model", "HOROVOD_TRAIN_CPU_BIND", "wall eff", "range", "CPU eff", "range"],
                     rows)])


def report(r: dict, labels: dict) -> str:
    parts = [model_section(name, fig, r, labels) for name, fig in r["models"].items()]
    parts += [overlap_section(name, fig) for name, fig in r["models"].items()
              if overlap_arms(fig["efficiency"])]
    bound = {name: fig for name, fig in r["models"].items()
             if "ours/gloo/unbound" in fig["efficiency"]}
    if bound:
        parts.append(binding_section(bound))
    return "\n\n".join(parts)
