"""docs/benchmarks.md's tables, rendered from benchmark results kept in the repository.

    python bench/report_doc.py keep NAME [--as LABEL] [--in_dir runs/bench]
    python bench/report_doc.py doc

runs/ is not tracked, so a run that the doc shows is kept: `keep` copies
runs/bench/NAME.json (what bench/run_all.py or one figure script wrote), without the raw
samples no table shows, to docs/bench-results/LABEL.json (LABEL defaults to NAME; e.g.
`keep comm --as comm_run2` for a second run beside the first). `doc` rewrites every
<!-- begin BLOCK --> ... <!-- end BLOCK --> block of docs/benchmarks.md from the kept
results, as BLOCKS says (and of docs/data.md, as DATA_BLOCKS says); the text around the
blocks is written by hand and kept.
tests/unit/test_bench_report_doc.py fails when the doc and its rendering differ.

To have a table rendered: run its script, keep the result, add the block to BLOCKS
(the tables are bench/doc_tables*.py's functions) and its markers to the doc, then `doc`.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, doc_tables, doc_tables_comm, doc_tables_data, doc_targets  # noqa: E402
from scripts import doc_blocks  # noqa: E402

KEPT = os.path.join(common.ROOT, "docs", "bench-results")
DOC = os.path.join(common.ROOT, "docs", "benchmarks.md")
DATA_DOC = os.path.join(common.ROOT, "docs", "data.md")  # its "Datasets of real shape"
# Raw samples behind a figure's means and medians, dropped when a result is kept: the
# tables show the figures made of them, and these are most of a result's bytes.
SAMPLES = frozenset({"per_rank", "summary_per_rank", "data_share", "plain_blocks_s",
                     "xla_blocks_s", "step_blocks_s", "check_samples_s", "rounds"})
# Of the machine: what a table's conditions line names.
MACHINE = ("Model name", "cpus", "Flags", "L2 cache", "L3 cache", "python")
# Figures whose tables need their samples (M1's per-round rates come from them).
KEEP_SAMPLES = frozenset({"m1_overhead"})


def trim(result, samples=SAMPLES):
    """The result without its raw samples (at any depth) and with the machine's few lines."""
    if isinstance(result, list):
        return [trim(x, samples) for x in result]
    if not isinstance(result, dict):
        return result
    out = {k: trim(v, samples) for k, v in result.items()
           if not (k in samples and isinstance(v, (list, dict)))}  # a count of rounds stays
    if isinstance(out.get("machine"), dict):
        out["machine"] = {k: v for k, v in out["machine"].items() if k in MACHINE}
    return out


def keep(name: str, label: str = "", in_dir: str = common.OUT_DIR) -> str:
    source = os.path.join(in_dir, f"{name}.json")
    if not os.path.isfile(source):
        raise SystemExit(f"keep: received {source}, which does not exist; expected a result "
                         f"of bench/run_all.py or a figure script. Fix: run it first, or pass "
                         f"--in_dir with the directory that holds {name}.json")
    with open(source) as f:
        result = json.load(f)
    kept = trim(result, frozenset() if name in KEEP_SAMPLES else SAMPLES)
    os.makedirs(KEPT, exist_ok=True)
    path = os.path.join(KEPT, f"{label or name}.json")
    with open(path, "w") as f:
        json.dump(kept, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def kept(label: str) -> dict:
    path = os.path.join(KEPT, f"{label}.json")
    if not os.path.isfile(path):
        raise SystemExit(f"{DOC}: a block needs {path}, which does not exist; expected a kept "
                         f"result. Fix: python bench/report_doc.py keep NAME --as {label}")
    with open(path) as f:
        return json.load(f)


def kept_if(label: str):
    """The kept result, or None when there is none (the summary shows what is kept)."""
    return kept(label) if os.path.isfile(os.path.join(KEPT, f"{label}.json")) else None


# The results the summary of targets reads (bench/doc_targets.py), each if kept.
SUMMARISED = ("m2_scaling", "comm", "m6_input", "m1_overhead", "epochs_memory",
              "tape_overhead", "divergence_overhead", "keras_guard_overhead", "startup",
              "data_scale")

# Block name in the doc -> its table, from the kept results it names.
BLOCKS = {
    "targets": lambda: doc_targets.targets({label: kept_if(label) for label in SUMMARISED}),
    "m2-resnet18_cifar": lambda: doc_tables.m2_efficiency(kept("m2_scaling"), "resnet18_cifar"),
    "m2-digits_cnn": lambda: doc_tables.m2_efficiency(kept("m2_scaling"), "digits_cnn"),
    "m2-overlap": lambda: doc_tables.m2_overlap(kept("m2_scaling"), "resnet18_cifar"),
    "m2-binding": lambda: doc_tables.m2_binding(kept("m2_scaling")),
    "small-allreduce": lambda: doc_tables_comm.small_allreduce([kept("comm")]),
    "m3": lambda: doc_tables_comm.m3([kept("comm")]),
    "m4": lambda: doc_tables_comm.m4([kept("comm")]),
    "m5": lambda: doc_tables_comm.m5([kept("comm")]),
    "m6-input": lambda: doc_tables.m6_input(kept("m6_input")),
    "m1-overhead": lambda: doc_tables.m1_overhead(kept("m1_overhead")),
    "xla": lambda: doc_tables.xla(kept("xla")),
    "epochs-memory": lambda: doc_tables.epochs_memory(kept("epochs_memory")),
    "divergence-overhead": lambda: doc_tables.divergence_overhead(kept("divergence_overhead")),
    "keras-guard-overhead": lambda: doc_tables.keras_guard_overhead(kept("keras_guard_overhead")),
    "tape-overhead": lambda: doc_tables.tape_overhead(kept("tape_overhead")),
    "startup": lambda: doc_tables.startup(kept("startup")),
}
# The same for docs/data.md.
DATA_BLOCKS = {"data-scale": lambda: doc_tables_data.data_scale_tables(kept("data_scale"))}
PAGES = {DOC: BLOCKS, DATA_DOC: DATA_BLOCKS}


def render(doc: str, blocks=None, path: str = DOC) -> str:
    """`doc` (the page at `path`) with each <!-- begin NAME --> ... <!-- end NAME -->
    block made anew."""
    tables = PAGES[path] if blocks is None else blocks
    return doc_blocks.fill(doc, {name: table() for name, table in tables.items()}, path,
                           "bench/report_doc.py's BLOCKS")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keep", help="store a result, trimmed, in docs/bench-results/")
    k.add_argument("name", help="the result's file name in --in_dir, without .json")
    k.add_argument("--as", dest="label", default="", help="the kept file's name (default NAME)")
    k.add_argument("--in_dir", default=common.OUT_DIR)
    sub.add_parser("doc", help="rewrite docs/benchmarks.md's and docs/data.md's blocks from "
                   "the kept results")
    args = parser.parse_args(argv)
    if args.command == "keep":
        print(f"wrote {keep(args.name, args.label, args.in_dir)}")
        return 0
    pages = {}
    for path in PAGES:  # every page rendered before any is opened for writing: a block
        with open(path) as f:  # that cannot render (a result not kept) truncates nothing
            pages[path] = render(f.read(), path=path)
    for path, doc in pages.items():
        with open(path, "w") as f:
            f.write(doc)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
