"""docs/data.md's "Datasets of real shape" tables and their rows in docs/benchmarks.md's
targets, from the kept result of bench/data_scale.py. Pure, like bench/doc_tables.py;
the figures and verdicts come from data_scale's own functions, as its report takes them.
"""
from bench import data_scale
from bench.doc_tables import conditions, markdown, verdict

LINK = "data.md#datasets-of-real-shape"


def _startup(r: dict) -> list:
    rows = [[f"{x['files']:,} files, {x['name']}", x["state"], f"{x['load_s']:.2f}",
             *(f"{1000 * p:.1f}" for p in x["plan_s"]), f"{x['total_s']:.2f}", verdict(x["met"])]
            for x in data_scale.startup_rows(r)]
    headers = ["data", "state", "load, s", *(f"plan, {w} workers, ms" for w in r["workers"]),
               "load + plan, s", f"< {r['target_start_s']:g} s"]
    parts = [f"{x['state']}: dataset.json {1000 * m['parse_s']:.0f} ms, stats "
             f"{1000 * m['stat_s']:.0f} ms, the memory {1000 * m['memory_s']:.0f} ms"
             for x in data_scale.startup_rows(r) if x["name"] == data_scale.MAIN_SET
             for m in [x["parts"]]]
    return ["**Start-up**: `tfrecord.load` and one rank's read plan, each state a fresh "
            "process, TensorFlow already imported.", "", markdown(headers, rows), "",
            "Parts, each timed alone after the load: " + "; ".join(parts) + "."]


def _conversion(r: dict) -> list:
    rows = [[c["kind"], f"{c['records']:,}", f"{c['seconds']:.1f}", f"{c['peak_rss_mb']:.0f}",
             c["progress_lines"], "yes" if c["carriage_returns"] else "no"]
            for c in data_scale.conversions(r)]
    grown = []
    for kind in data_scale.KINDS:
        g = data_scale.growth(r, kind)
        grown.append(f"{kind} x{g['ratio']:.3f} ({g['added_mb']:+.0f} MiB)")
    return ["**Converting** (`--num_shards 16`, stderr to a file): the converter's own peak RSS.",
            "", markdown(["input", "records", "wall, s", "peak RSS, MiB", "progress lines",
                          "`\\r` in the log"], rows), "",
            "Peak RSS, 10x the records / 1x: " + ", ".join(grown) + "."]


def _evaluation(r: dict) -> list:
    rows = []
    for e in data_scale.eval_splits(r):
        for name, run in e["runs"].items():
            rows.append([f"{e['eval_bytes'] / 1e9:.2f} GB", f"{e['eval_records']:,}",
                         f"`{name}`" if name.startswith("--") else name,
                         f"{run['predictions']:,}", f"{run['seconds']:.1f}",
                         f"{run['peak_rss_mb']:.0f}"])
    g = data_scale.eval_growth(r)
    return ["**Evaluation**, 1 process: `digits_mlp`, 2 training steps, then the whole test "
            "split.", "", markdown(["test split", "records", "run", "predictions", "wall, s",
                                    "peak RSS, MiB"], rows), "",
            f"Peak RSS, largest split / smallest: {g['ratio']:.3f} "
            f"(target <= {r['growth_flat']:g}: {verdict(g['met'])}): {g['added_mb']:+.0f} MiB "
            f"for +{g['added_split_mb']:,.0f} MiB of records."]


def data_scale_tables(r: dict) -> str:
    return "\n".join([conditions(r), "", *_startup(r), "", *_conversion(r), "",
                      *_evaluation(r)])


def data_scale_rows(r: dict) -> list:
    """Rows of docs/benchmarks.md's targets: [figure, target, ours, beside it, verdict]."""
    startup = data_scale.startup_rows(r)
    first = [x for x in startup if x["name"] == data_scale.MAIN_SET]
    images, ev = data_scale.growth(r, "images"), data_scale.eval_growth(r)
    return [
        [f"[start-up, {first[0]['files']:,} TFRecord files: load + plan]({LINK})",
         f"< {r['target_start_s']:g} s",
         ", ".join(f"{x['state']} {x['total_s']:.2f} s" for x in first), "",
         verdict(all(x["met"] for x in first))],
        [f"[converter's peak RSS, {images['records'][1]:,} / {images['records'][0]:,} "
         f"images]({LINK})", f"<= {r['growth_flat']:g}", f"{images['ratio']:.3f}",
         f"{images['added_mb']:+.0f} MiB", verdict(images["met"])],
        [f"[evaluation's peak RSS, {ev['bytes'][1] / 1e9:.1f} / {ev['bytes'][0] / 1e9:.1f} GB "
         f"test split]({LINK})", f"<= {r['growth_flat']:g}", f"{ev['ratio']:.3f}",
         f"{ev['peak_mb'][0]:.0f} -> {ev['peak_mb'][1]:.0f} MiB", verdict(ev["met"])],
    ]
