"""Issue 41 item 4: datasets of real shape (start-up, conversion, evaluation).

  python bench/data_scale.py [--short] [--out runs/bench/data_scale.json]

a) Start-up with 10,000 TFRecord files (4 small records each, and 100 eval files):
   tfrecord.load (dataset.json read, every file checked) and the first rank's read
   plan for 8 and 64 workers, in three states, each a fresh process (TensorFlow's
   import not counted): verification cold (the memory empty: a first launch),
   remembered (a relaunch) and --noverify_data (sizes compared). Target: < 5 s. The
   full run adds a cold start of 10,000 files of 32 records (what cold scales with).
b) The converter on an image folder (16x16 PNGs in 10 class folders), an .npz and a
   text file, each of N and 10N records: its peak RSS (its own, os.wait4) and its
   progress in a log (stderr is a file here, not a terminal). Target: the image
   folder's peak does not grow with N.
c) Evaluation streams: `python -m horovod_train` (1 process, digits_mlp, 2 steps,
   --noverify_data) on 64x64x3 records with test splits of 0.3, 1 and 2 GB; the
   large one again with --cache=memory (it caches training only) and under an
   RLIMIT_DATA (heap and anonymous memory) smaller than the split. Target: peak RSS
   about flat.
--short: b) with 5,000 / 50,000 records, c) 64 MB / 640 MB splits and no limit run.
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

WORKER = os.path.join(common.ROOT, "bench", "data_scale_worker.py")
TARGET_START_S = 5.0
FILES, EVAL_FILES = 10000, 100
WORKERS = (8, 64)
# c): below the full run's 2 GB split, above what the program needs of its own (it died
# under 1024 MiB: TensorFlow and Keras alone take most of that)
DATA_LIMIT_MB = 1536
GROWTH_FLAT = 1.10  # "flat": the larger input's peak within 10% of the smaller's
KINDS = ("images", "npz", "text")  # the converter's inputs
STATES = ("cold", "remembered", "sizes only")  # a): verification's states, in launch order
MAIN_SET = "4 records a file"  # a): the set measured in every state (the full run adds one)


def _worker(*args, timeout: float = 900) -> dict:
    return common.json_lines(common.run([common.PY, WORKER, *map(str, args)], timeout))[-1]


def startup(tmp: str, short: bool) -> dict:
    sets = {MAIN_SET: 4} if short else {MAIN_SET: 4, "32 records a file": 32}
    out = {}
    for name, records in sets.items():
        data = os.path.join(tmp, f"files{records}")
        wrote = _worker("files", data, "--train_files", FILES, "--eval_files", EVAL_FILES,
                        "--records", records)
        workers = ",".join(map(str, WORKERS))
        states = {"cold": _worker("load", data, "--workers", workers)}
        if name == MAIN_SET:
            states["remembered"] = _worker("load", data, "--workers", workers)
            states["sizes only"] = _worker("load", data, "--workers", workers, "--noverify")
        out[name] = {"write_s": wrote["write_s"], "bytes": sum(wrote["bytes"].values()),
                     "states": states}
    return out


PROGRESS = re.compile(r"-> tfrecord \[[# ]*\] +\d+% \d+/\d+ ")
WROTE = re.compile(r"(\d+) records in \d+ file")  # the converter's closing line, per split


def _convert(source: str, out_dir: str) -> dict:
    run = common.run_peak([common.PY, "-m", "horovod_train.data", "convert", "--input", source,
                           "--output_dir", out_dir, "--num_shards", "16"], timeout=1800)
    text = run.pop("output")
    return {**run, "written": sum(int(n) for n in WROTE.findall(text)),
            "progress_lines": len(PROGRESS.findall(text)), "carriage_returns": "\r" in text,
            "last_lines": [line for line in text.splitlines() if PROGRESS.search(line)][-2:]}


def conversion(tmp: str, short: bool) -> dict:
    sizes = (5000, 50000) if short else (10000, 100000)
    out = {}
    for kind, ext in zip(KINDS, ("", ".npz", ".txt")):
        for records in sizes:
            source = os.path.join(tmp, f"{kind}{records}{ext}")
            made = _worker(kind, source, "--records", records)
            converted = _convert(source, os.path.join(tmp, f"out-{kind}{records}"))
            out[f"{kind} {records}"] = {"kind": kind, "records": records, "input": made,
                                        **converted}
    return out


EVAL_LINE = re.compile(r"eval  \| final .* on (\d+) predictions")


def _train(data: str, *flags, data_limit: int | None = None) -> dict:
    run = common.run_peak([common.PY, "-m", "horovod_train", "--dataset=tfrecord",
                           f"--data_dir={data}", "--model=digits_mlp", "--max_steps=2",
                           "--noverify_data", "--progress=lines", *flags], timeout=1800,
                          data_limit=data_limit)
    found = EVAL_LINE.search(run.pop("output"))
    return {**run, "predictions": int(found.group(1)) if found else None}


def evaluation(tmp: str, short: bool) -> dict:
    sizes = (64, 640) if short else (320, 1024, 2048)
    out = {}
    for mb in sizes:
        data = os.path.join(tmp, f"eval{mb}")
        made = _worker("evalset", data, "--eval_mb", mb)
        runs = {"plain": _train(data)}
        if mb == sizes[-1]:
            runs["--cache=memory"] = _train(data, "--cache=memory")
            if made["bytes"]["test"] > DATA_LIMIT_MB << 20:
                runs[f"RLIMIT_DATA {DATA_LIMIT_MB} MiB"] = _train(
                    data, data_limit=DATA_LIMIT_MB << 20)
        out[f"{mb} MB"] = {"eval_bytes": made["bytes"]["test"], "eval_records":
                           made["eval_records"], "write_s": made["write_s"], "runs": runs}
        shutil.rmtree(data)  # the next set's room on disk
    return out


def measure(short: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="data_scale-") as tmp:
        result = {"startup": startup(tmp, short), "conversion": conversion(tmp, short),
                  "evaluation": evaluation(tmp, short)}
    result.update(target_start_s=TARGET_START_S, growth_flat=GROWTH_FLAT, workers=list(WORKERS))
    return result


# --- figures from a result: the one place its verdicts are taken (report, docs) ----

def startup_rows(r: dict) -> list:
    """Per data set and state: {name, state, files, load_s, plan_s [per worker count],
    total_s (load + the slower plan), met (total_s < the target)}."""
    rows = []
    for name, s in sorted(r["startup"].items(), key=lambda item: item[1]["bytes"]):
        for state in [x for x in STATES if x in s["states"]]:
            m = s["states"][state]
            plans = [m["plan_s"][str(w)] for w in r["workers"]]
            total = m["load_s"] + max(plans)
            rows.append({"name": name, "state": state, "files": m["files"], "records": m["records"],
                         "load_s": m["load_s"], "plan_s": plans, "total_s": total,
                         "met": total < r["target_start_s"], "parts": m})
    return rows


def growth(r: dict, kind: str) -> dict:
    """The converter's peak RSS on `kind`, larger input over smaller."""
    small, large = sorted((c for c in r["conversion"].values() if c["kind"] == kind),
                          key=lambda c: c["records"])
    ratio = common.ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    return {"records": (small["records"], large["records"]), "ratio": ratio,
            "added_mb": large["peak_rss_mb"] - small["peak_rss_mb"],
            "met": ratio <= r["growth_flat"]}


def eval_growth(r: dict) -> dict:
    """Peak RSS of the plain evaluation runs, largest split over smallest."""
    splits = eval_splits(r)
    plain = [e["runs"]["plain"]["peak_rss_mb"] for e in splits]
    sizes = [e["eval_bytes"] for e in splits]
    ratio = common.ratio(plain[-1], plain[0])
    return {"ratio": ratio, "bytes": (sizes[0], sizes[-1]), "peak_mb": (plain[0], plain[-1]),
            "added_mb": plain[-1] - plain[0], "added_split_mb": (sizes[-1] - sizes[0]) / (1 << 20),
            "met": ratio <= r["growth_flat"]}


def eval_splits(r: dict) -> list:
    """The evaluation's test splits, smallest first (a kept result's keys are sorted as
    text), each with its runs in order: plain first."""
    def plain_first(runs):
        return {n: runs[n] for n in sorted(runs, key=lambda n: (n != "plain", n))}
    return [dict(e, runs=plain_first(e["runs"]))
            for e in sorted(r["evaluation"].values(), key=lambda e: e["eval_bytes"])]


def conversions(r: dict) -> list:
    """The converter's runs by input kind, then record count."""
    return sorted(r["conversion"].values(), key=lambda c: (KINDS.index(c["kind"]), c["records"]))


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def _startup_report(r: dict) -> list:
    rows, parts = [], []
    for x in startup_rows(r):
        rows.append([f"{x['files']} files, {x['name']}", x["state"], f"{x['load_s']:.3f}",
                     *(f"{p * 1000:.1f}" for p in x["plan_s"]), f"{x['total_s']:.2f}",
                     verdict(x["met"])])
        m = x["parts"]
        parts.append(f"  {x['name']}, {x['state']}: dataset.json {m['parse_s'] * 1000:.0f} ms, "
                     f"per-file stats {m['stat_s'] * 1000:.0f} ms, the memory's JSON "
                     f"{m['memory_s'] * 1000:.0f} ms, {x['records']} records")
    headers = ["data", "state", "load s", *(f"plan {w} ms" for w in r["workers"]),
               "load + plan s", f"< {r['target_start_s']:g} s"]
    return ["a) Start-up: tfrecord.load + the read plan (TensorFlow already imported)",
            common.table(headers, rows), "parts, each timed alone after the load:", *parts]


def _conversion_report(r: dict) -> list:
    rows = [[c["kind"], c["records"], c["written"], f"{c['seconds']:.1f}",
             f"{c['peak_rss_mb']:.0f}", c["progress_lines"],
             "yes" if c["carriage_returns"] else "no"] for c in conversions(r)]
    lines = []
    for kind in KINDS:
        g = growth(r, kind)
        target = f" (target <= {r['growth_flat']}: {verdict(g['met'])})" \
            if kind == "images" else ""
        lines.append(f"  {kind}: x{g['records'][1] // g['records'][0]} records -> peak RSS "
                     f"x{g['ratio']:.3f} ({g['added_mb']:+.0f} MiB){target}")
    headers = ["input", "records", "written", "wall s", "peak RSS MiB", "progress lines",
               "\\r in log"]
    return ["b) Converting (stderr to a file, as in CI or Slurm)", common.table(headers, rows),
            *lines]


def _evaluation_report(r: dict) -> list:
    rows = []
    for e in eval_splits(r):
        for run_name, run in e["runs"].items():
            rows.append([f"{e['eval_bytes'] / 1e9:.2f} GB", e["eval_records"], run_name,
                         run["predictions"], f"{run['seconds']:.1f}", f"{run['peak_rss_mb']:.0f}"])
    g = eval_growth(r)
    headers = ["test split", "records", "run", "predictions", "wall s", "peak RSS MiB"]
    return ["c) Evaluation, 1 process: 2 training steps, then the whole test split",
            common.table(headers, rows), f"  peak RSS, large split / small: {g['ratio']:.3f} "
            f"(target <= {r['growth_flat']}: {verdict(g['met'])}); {g['added_mb']:+.0f} MiB "
            f"for +{g['added_split_mb']:,.0f} MiB of records"]


def report(r: dict) -> str:
    return "\n".join(["Datasets of real shape (issue 41 item 4)", *_startup_report(r),
                      *_conversion_report(r), *_evaluation_report(r)])


if __name__ == "__main__":
    common.main("data_scale", __doc__, measure, report)
