"""`python -m horovod_train.report RUN_DIR [RUN_DIR ...]`: where the time went.

Reads each run directory's metrics.jsonl (and summary.json when the run finished),
prints one table row per run, and writes PNG plots: in each run directory
throughput.png and breakdown.png; given runs at several world sizes, scaling.png
(throughput and efficiency against world size) in --out. TF-free.
"""
import argparse
import dataclasses
import json
import os
import sys

from horovod_train import console, metrics
from horovod_train.errors import UsageError, usage_error
from horovod_train.observe import baseline
from horovod_train.observe.observer import BREAKDOWN_PARTS, RENAMED_PARTS, traced
from launch import usage
from launch.argv import normalize_flag_names
from launch.redact import redact

PROG = "horovod_train.report"


class _Parser(usage.Parser):
    error_type = UsageError


@dataclasses.dataclass
class Run:
    path: str
    start: dict
    train: list
    evals: list
    summary: dict | None

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path)) or self.path

    @property
    def world_size(self) -> int:
        return int(self.start.get("world_size", 1))


def load_run(path: str) -> Run:
    metrics_path = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise usage_error("RUN_DIR", path, "a directory holding metrics.jsonl",
                          "pass the --run_dir of a finished or running training run")
    records = []
    with open(metrics_path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash: skip it, keep the rest
    starts = [r for r in records if r.get("kind") == "start"]
    by_step = {r["step"]: _renamed(r) for r in records if r.get("kind") == "train"}  # resumes overwrite
    summary = None
    summary_path = os.path.join(path, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
    return Run(path, starts[-1] if starts else {}, [by_step[s] for s in sorted(by_step)],
               [r for r in records if r.get("kind") == "eval"], summary)


def _renamed(record: dict) -> dict:
    """A train record under today's part names (older runs wrote "guard")."""
    parts = record.get("seconds_per_step", {})
    if any(old in parts for old in RENAMED_PARTS):
        record["seconds_per_step"] = {RENAMED_PARTS.get(k, k): v for k, v in parts.items()}
    return record


def steady(train: list) -> list:
    """The intervals that traced nothing (all of them when every one traced)."""
    return [r for i, r in enumerate(train) if not traced(r, i)] or train


def mean_breakdown(train: list) -> dict:
    """Seconds per step of each part, averaged over intervals weighted by their steps."""
    totals, steps = {}, 0
    for record in steady(train):
        n = record.get("steps", 1)
        steps += n
        for part, seconds in record["seconds_per_step"].items():
            totals[part] = totals.get(part, 0.0) + seconds * n
    return {p: totals[p] / steps for p in BREAKDOWN_PARTS if p in totals} if steps else {}


def throughput(run: Run) -> float | None:
    """The summary's samples/s (metrics.Throughput, per rank, summed over ranks), rebuilt
    from the intervals' per-rank rates. Each interval counts as `steps` samples over
    steps / rate seconds: a rank's batch is the same in every interval, so it cancels."""
    tallies = []
    for i, r in enumerate(run.train):
        rates = r["samples_per_sec_per_rank"]
        tallies += [metrics.Throughput() for _ in range(len(rates) - len(tallies))]
        for tally, rate in zip(tallies, rates):
            if rate > 0:
                tally.add(r.get("steps", 1), r.get("steps", 1) / rate, traced(r, i))
    rates = [t.rate() for t in tallies]
    if rates and None not in rates:
        return sum(rates)
    return (run.summary or {}).get("samples_per_sec")


def efficiencies(runs: list) -> dict:
    """path -> efficiency: against a 1-rank run of the same config key among `runs`,
    else against the baseline the run itself recorded."""
    one_rank = {r.start.get("config_key"): throughput(r) for r in runs if r.world_size == 1}
    out = {}
    for run in runs:
        base = one_rank.get(run.start.get("config_key")) or run.start.get("baseline_samples_per_sec")
        rate = throughput(run)
        out[run.path] = baseline.efficiency(rate, run.world_size, base) if rate else None
    return out


def table_rows(runs: list) -> list[dict]:
    effs = efficiencies(runs)
    rows = []
    for run in runs:
        parts = mean_breakdown(run.train)
        total = sum(parts.values())
        rate = throughput(run)
        accuracy = (run.summary or {}).get("test_accuracy")
        if accuracy is None and run.evals:
            accuracy = run.evals[-1]["accuracy"]
        rows.append({"run": run.name, "ranks": run.world_size,
                     "steps": run.train[-1]["step"] if run.train else 0,
                     "samples/s": rate, "per rank": rate / run.world_size if rate else None,
                     "efficiency %": 100 * effs[run.path] if effs[run.path] else None,
                     "step ms": 1000 * total if total else None,
                     **{f"{p} %": 100 * parts[p] / total for p in parts if total},
                     "accuracy": accuracy})
    return rows


def _cell(column: str, value) -> str:
    if value is None:
        return "-"
    if column == "accuracy":
        return f"{value:.4f}"
    if isinstance(value, float):
        return f"{value:.0f}" if column in ("samples/s", "per rank") else f"{value:.1f}"
    return str(value)


# One order for every table, whichever parts each run measured (the parts as the line shows them).
COLUMNS = ("run", "ranks", "steps", "samples/s", "per rank", "efficiency %", "step ms",
           *(f"{part} %" for part in BREAKDOWN_PARTS), "accuracy")


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no runs)"
    seen = {c for row in rows for c in row}
    columns = [c for c in COLUMNS if c in seen] + sorted(seen - set(COLUMNS))
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def write_plots(runs: list, out_dir: str) -> list[str]:
    from horovod_train.observe import plots
    written = []
    for run in runs:
        written.append(plots.throughput([run], os.path.join(run.path, "throughput.png")))
        written.append(plots.breakdown(run, os.path.join(run.path, "breakdown.png")))
    if len(runs) > 1:
        os.makedirs(out_dir, exist_ok=True)
        written.append(plots.throughput(runs, os.path.join(out_dir, "throughput.png")))
    if len({r.world_size for r in runs}) > 1:
        effs = efficiencies(runs)
        points = sorted((r.world_size, throughput(r), effs[r.path], r.name) for r in runs
                        if throughput(r))
        written.append(plots.scaling(points, os.path.join(out_dir, "scaling.png")))
    return written


def parse_args(argv=None, prog: str = PROG) -> argparse.Namespace:
    # The project's one spelling: dashes in names mean underscores (launch/argv.py).
    parser = _Parser(prog=prog, description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", help="where scaling.png goes (default: the runs' common parent)")
    parser.add_argument("--no_plots", action="store_true", help="print the table only")
    return parser.parse_args(normalize_flag_names(sys.argv[1:] if argv is None else list(argv)))


def main(argv=None, prog: str = PROG) -> int:
    try:
        args = parse_args(argv, prog)
        runs = [load_run(p) for p in args.run_dirs]
    except UsageError as err:
        console.last_line(usage.error_line(prog, err))
        return 2
    except SystemExit as done:  # --help
        return int(done.code or 0)
    print(redact(format_table(table_rows(runs))))  # a run's name is its directory's
    if not args.no_plots:
        out = args.out or os.path.commonpath([os.path.abspath(r.path) for r in runs])
        for path in write_plots(runs, out):
            print(f"wrote {redact(path)}")
    return 0


if __name__ == "__main__":
    from horovod_train import commands
    commands.standalone(main)
