"""docs/benchmarks.md's "Targets at a glance": one row per target, from the same kept
results as the tables below it (bench/report_doc.py's BLOCKS), so the summary cannot
disagree with them. Pure, like bench/doc_tables.py: results in, Markdown out.

Each row function takes the kept result of its figure and returns rows of
[figure, target, ours, beside it, verdict]; a figure not kept gives no row.
"""
from bench import comm, common, input_pipeline
from bench.doc_tables_data import data_scale_rows
from bench.doc_tables import VOID_CHECK_S, markdown, verdict

# Sizes the small-allreduce row shows (the table has every size up to 1 MiB).
SMALL_SIZES = (4 << 10, 64 << 10, 1 << 20)


def _link(text: str, anchor: str) -> str:
    return f"[{text}](#{anchor})"


def _count(oks: list, noun: str) -> str:
    """'met', '**missed**', or '**missed** in 2 of 3 sizes'."""
    if all(oks) or not any(oks):
        return verdict(all(oks))
    return f"**missed** in {oks.count(False)} of {len(oks)} {noun}"


def m2_rows(r: dict) -> list:
    rows = []
    for model, fig in r["models"].items():
        eff = fig["efficiency"]
        for c, name in (("gloo", "Gloo"), ("mpi", "MPI")):
            if f"ours/{c}" not in eff:
                continue
            e = eff[f"ours/{c}"]
            beside = [f"{what} {eff[key]['wall']:.3f}" for what, key in
                      (("bare Horovod loop", f"bare/{c}"), ("ceiling", "ceiling")) if key in eff]
            rows.append([_link(f"M2 efficiency, {model}, {name}", "m2-data-parallel-efficiency"),
                         f">= {fig['target']:g}",
                         f"{e['wall']:.3f} ({e['wall_range'][0]:.3f}-{e['wall_range'][1]:.3f}), "
                         f"CPU {e['cpu']:.3f}", "; ".join(beside),
                         verdict(e["wall"] >= fig["target"])])
    return rows


def small_rows(r: dict) -> list:
    by_size = {m["bytes"]: (m, g) for m, g in zip(r["m3"], r["m3_gloo"])}
    sizes = [s for s in SMALL_SIZES if s in by_size]
    label = " / ".join(common.size_label(s) for s in sizes)
    alone = " / ".join(f"{1e6 * by_size[s][0]['bare_mpi4py_s']:,.0f}" for s in sizes)
    rows = []
    for i, name in ((0, "MPI"), (1, "Gloo")):
        us = [1e6 * by_size[s][i]["ours_s"] for s in sizes]
        every = [1e6 * pair[i]["ours_s"] for pair in by_size.values()
                 if pair[0]["bytes"] <= comm.SMALL_MAX]
        rows.append([_link(f"one allreduce in a step, {name}, {label}", "one-small-allreduce"),
                     f"<= {comm.SMALL_TARGET_US:g} us", " / ".join(f"{x:,.0f} us" for x in us),
                     f"mpi4py alone {alone} us" if i == 0 else "",
                     _count([x <= comm.SMALL_TARGET_US for x in every], "sizes")])
    return rows


def comm_rows(r: dict) -> list:
    big = [x for x in r["m3"] if x["bytes"] >= comm.M3_FROM]
    m4, k1 = r["m4"], next(x for x in r["m5"] if x["k"] == 1)
    seconds = m4["seconds"]
    horovod = common.ratio(seconds["Horovod grouped_allreduce"], seconds["grouped (ours)"])
    return [
        [_link("M3 ours / mpi4py alone, " + " / ".join(common.size_label(x["bytes"]) for x in big),
               "m3-allreduce-bus-bandwidth-ours-vs-raw-mpi4py"), f">= {comm.M3_TARGET:g}",
         " / ".join(f"{x['ratio']:.2f}" for x in big), "mpi4py alone = 1.0",
         _count([x["ratio"] >= comm.M3_TARGET for x in big], "sizes")],
        [_link(f"M4 {m4['tensors']} x {common.size_label(m4['tensor_bytes'])} in a step / "
               "mpi4py's one buffer", "m4-one-steps-many-small-tensors"), f"<= {comm.M4_TARGET:g}x",
         f"{m4['grouped_over_mpi4py']:.2f}x", f"Horovod `grouped_allreduce`: {horovod:.2f}x ours",
         verdict(m4["grouped_over_mpi4py"] <= comm.M4_TARGET)],
        [_link("M5 k = 1 efficiency (with comm / without)", "m5-gradient-accumulation"),
         f">= {comm.M5_TARGET:g}", f"{k1['efficiency']:.3f} (CPU {k1['cpu_efficiency']:.3f})", "",
         verdict(k1["efficiency"] >= comm.M5_TARGET)]]


def m6_rows(r: dict) -> list:
    wait = max(c["data_wait"] for c in r["cases"])
    headroom = min(c["headroom"] for c in r["cases"])
    floor = max(c["floor_wait"] for c in r["cases"])
    return [[_link("M6 data wait, headroom (worst case)", "m6-the-input-pipeline"),
             f"< {100 * input_pipeline.TARGET_WAIT:g}%, >= {input_pipeline.TARGET_HEADROOM:g}x",
             f"{100 * wait:.1f}%, {headroom:.1f}x", f"the wait's floor {100 * floor:.1f}%",
             verdict(all(input_pipeline.meets_targets(c) for c in r["cases"]))]]


def m1_rows(r: dict) -> list:
    return [[_link("M1 step time ours / `model.fit`, 1 process",
                   "m1-overhead-over-plain-keras-modelfit"),
             f"<= {r['target']:g}", f"{r['step_time_ratio']:.3f}",
             f"fit with our allocator: {r['step_time_ratio_pooled']:.3f}",
             f"{verdict(r['step_time_ratio'] <= r['target'])}; with our allocator "
             f"{verdict(r['step_time_ratio_pooled'] <= r['target'])}"]]


def epochs_rows(r: dict) -> list:
    return [[_link("start-up and memory, many epochs / one", "start-up-and-memory-against---epochs"),
             f"<= {r['target']:g}",
             f"peak RSS {r['rss_ratio']:.3f}, first step {r['first_step_ratio']:.3f}",
             "", verdict(max(r["rss_ratio"], r["first_step_ratio"]) <= r["target"])]]


def guard_rows(trainer: dict, keras: dict) -> list:
    rows = []
    if trainer:
        worst = max(x["epoch_ratio"] for x in trainer["models"])
        void = any(x["check_s"] < VOID_CHECK_S for x in trainer["models"])
        rows.append([_link("divergence check, trainer: epoch with / without",
                           "the-divergence-guards"), f"<= {trainer['target']:g}",
                     "void (the check did not run)" if void else f"{worst:.5f}", "",
                     "not measured" if void else verdict(worst <= trainer["target"])])
    if keras:
        worst = max(x["overhead"] for x in keras["rows"])
        rows.append([_link("divergence guard, Keras drop-in, 2 ranks", "the-divergence-guards"),
                     f"<= {100 * keras['target']:g}% of step time", f"{100 * worst:.3f}%", "",
                     verdict(worst <= keras["target"])])
    return rows


def tape_rows(r: dict) -> list:
    worst = max(r["rows"], key=lambda x: x["ratio"])
    return [[_link("`DistributedGradientTape` / hand-written `grouped_allreduce`",
                   "the-gradienttape-api-against-a-hand-written-loop"), f"<= {r['target']:g}",
             f"{min(x['ratio'] for x in r['rows']):.3f}-{worst['ratio']:.3f} "
             f"(worst: {worst['model']}, {worst['controller']}, {worst['buckets']})", "",
             _count([x["ratio"] <= r["target"] for x in r["rows"]], "cases")]]


def startup_rows(r: dict) -> list:
    return [[_link("time to the first step, ours / plain Keras `model.fit`",
                   "the-time-to-the-first-step"), f"<= {r['target']:g}",
             " / ".join(f"{c['case']} {c['ratio']:.3f}" for c in r["cases"]), "",
             _count([c["ratio"] <= r["target"] for c in r["cases"]], "cases")]]


def targets(kept: dict) -> str:
    """The table from {label: kept result or None}; labels as bench/report_doc.py keeps them."""
    rows = []
    for label, fn in (("m2_scaling", m2_rows), ("comm", small_rows), ("comm", comm_rows),
                      ("m6_input", m6_rows), ("m1_overhead", m1_rows),
                      ("epochs_memory", epochs_rows), ("tape_overhead", tape_rows),
                      ("startup", startup_rows), ("data_scale", data_scale_rows)):
        if kept.get(label):
            rows += fn(kept[label])
    rows += guard_rows(kept.get("divergence_overhead"), kept.get("keras_guard_overhead"))
    return markdown(["figure", "target", "ours", "beside it", "verdict"], rows)
