"""Throughput of the horovod backend against mwms, same model, data and ranks, in one run.

  python bench/backends.py [--np 2] [--repeats 2] [-- extra training flags]

Runs alternate (horovod, mwms, horovod, mwms, ...) so that machine noise hits both.
The table prints img/sec per rank (mean +- 1.96 sd over logged intervals and runs)
and the total; `make bench` gets the same comparison from bench/scaling.py.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, runs  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--out", default=os.path.join(common.OUT_DIR, "backends.json"))
    parser.add_argument("flags", nargs="*", help="extra training flags (after --)")
    args = parser.parse_args(argv)
    flags = runs.ours_flags(args.steps, extra=args.flags)
    got = {"horovod": [], "mwms": []}
    for i in range(args.repeats):
        got["horovod"].append(runs.ours(common.launcher("gloo", args.np), args.steps,
                                        extra=args.flags))
        got["mwms"].append(runs.mwms(args.np, flags))
        print(f"repeat {i + 1}/{args.repeats} done", flush=True)
    merged = {k: {"per_rank": [r for run in v for r in run["per_rank"]], "ranks": args.np}
              for k, v in got.items()}
    mean = {k: common.mean_ci(v["per_rank"])[0] for k, v in merged.items()}
    print(common.table(common.RATE_HEADERS, [common.rate_row(k, v) for k, v in merged.items()]))
    print(f"horovod / mwms throughput = {common.ratio(mean['horovod'], mean['mwms']):.2f}")
    common.write_json(args.out, {"runs": got, "merged": merged, "flags": flags,
                                 "machine": common.machine()})


if __name__ == "__main__":
    main()
