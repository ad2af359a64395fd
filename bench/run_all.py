"""Every figure of issue 12 in one invocation: M1..M6 and horovod vs mwms, and issue
18's step with and without XLA on CPU.

  python bench/run_all.py [--short] [--out_dir runs/bench] [--only m1,m2,comm,xla,m6]

`make bench` runs the short version (fewer steps and repeats). Since issue 23, M2
trains resnet18_cifar (~2-4 s a step per rank on one core) beside digits_cnn in 2
interleaved repeats, so the short version takes well over half an hour on a 2-core host;
`python bench/scaling.py --smoke` is the quick end-to-end check. Each figure prints its
table (wall clock and CPU-seconds per image, the machine's load before and after) and
writes <out_dir>/<name>.json; bench/plot.py turns those into docs/benchmarks.png.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import comm, common, overhead, plot, scaling, xla  # noqa: E402

FIGURES = {
    "m1_overhead": (overhead.measure, overhead.report),
    "m2_scaling": (scaling.measure, scaling.report),
    "comm": (comm.measure, comm.report),
    "xla": (xla.measure, xla.report),  # issue 18
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--out_dir", default=common.OUT_DIR)
    parser.add_argument("--only", default="", help="comma-separated figure names")
    parser.add_argument("--plot", default=os.path.join(common.ROOT, "docs", "benchmarks.png"))
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    start = time.perf_counter()
    print(f"machine: {common.machine()}", flush=True)
    for name, (measure, report) in FIGURES.items():
        if not only or name in only:
            common.run_figure(name, measure, report, args.short,
                              os.path.join(args.out_dir, f"{name}.json"))
    if not only or "m6_input" in only:
        # In a child: TensorFlow must not run in this (orchestrating) process.
        flags = ["--short"] if args.short else ["--profile"]
        print(common.quiet(common.run([common.PY, os.path.join(common.ROOT, "bench", "input_pipeline.py"),
                          *flags, f"--out={os.path.join(args.out_dir, 'm6_input.json')}"],
                         timeout=1800)), flush=True)
    print(f"plot: {plot.plot(args.out_dir, args.plot)}")
    print(f"all figures: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
