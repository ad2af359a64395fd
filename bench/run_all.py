"""Every benchmark figure in one invocation.

M1..M6 and horovod vs mwms (issues 12 and 23), the step with and without XLA on CPU
(issue 18), the divergence guard's cost (the trainer's check and the Keras drop-in's),
start-up and memory against --epochs (issue 46), the time to the first step against
plain Keras (issue 41) and datasets of real shape (issue 41 item 4).

  python bench/run_all.py [--short] [--out_dir runs/bench] [--only m1_overhead,comm,...]

`make bench` runs the short version (fewer steps and repeats). Since issue 23, M2
trains resnet18_cifar (~2-4 s a step per rank on one core) beside digits_cnn in 2
interleaved repeats, so the short version takes well over half an hour on a 2-core host;
`python bench/scaling.py --smoke` is the quick end-to-end check. Each figure prints its
table (wall clock and CPU-seconds per image, the machine's load before and after) and
writes <out_dir>/<name>.json; bench/plot.py turns those into docs/benchmarks.png, and
bench/report_doc.py keeps those docs/benchmarks.md shows and renders its tables.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import (comm, common, data_scale, epochs_memory, keras_guard_overhead,  # noqa: E402
                   overhead, plot, scaling, shard_state, startup, tape_overhead, xla)

# Figures whose orchestration is TF-free: measured in this process.
FIGURES = {
    "m1_overhead": (overhead.measure, overhead.report),
    "m2_scaling": (scaling.measure, scaling.report),
    "comm": (comm.measure, comm.report),
    "xla": (xla.measure, xla.report),  # issue 18
    "keras_guard_overhead": (keras_guard_overhead.measure, keras_guard_overhead.report),
    "epochs_memory": (epochs_memory.measure, epochs_memory.report),  # issue 46
    "tape_overhead": (tape_overhead.measure, tape_overhead.report),  # issue 40
    "startup": (startup.measure, startup.report),  # issue 41: time to the first step
    "data_scale": (data_scale.measure, data_scale.report),  # issue 41 item 4
    "shard_state": (shard_state.measure, shard_state.report),  # issue 44 item 4
}
# Figures that run TensorFlow in their own process: started as children, since TF must not
# run in this orchestrating one. name -> (script, flags of the short version, of the full).
CHILD_FIGURES = {
    "m6_input": ("input_pipeline.py", ["--short"], ["--profile"]),
    "divergence_overhead": ("divergence_overhead.py", ["--short"], []),
    "evaluation": ("evaluation.py", ["--short"], []),
}
# Scripts that write a figure's JSON but are not run here, and why.
DIAGNOSTICS = {
    "small_allreduce.py": "a sweep of Horovod's cycle time and cache, and one Horovod build "
                          "against another (scripts/horovod-patches); what a step pays for a "
                          "small allreduce is comm's figure",
}


def run_child(name: str, short: bool, out_dir: str):
    script, short_flags, full_flags = CHILD_FIGURES[name]
    out = os.path.join(out_dir, f"{name}.json")
    argv = [common.PY, os.path.join(common.ROOT, "bench", script),
            *(short_flags if short else full_flags), f"--out={out}"]
    print(common.quiet(common.run(argv, timeout=1800)), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--out_dir", default=common.OUT_DIR)
    parser.add_argument("--only", default="", help="comma-separated figure names, of "
                        + ", ".join([*FIGURES, *CHILD_FIGURES]))
    parser.add_argument("--plot", default=os.path.join(common.ROOT, "docs", "benchmarks.png"))
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    unknown = only - set(FIGURES) - set(CHILD_FIGURES)
    if unknown:
        parser.error(f"--only: received {sorted(unknown)}; expected names from "
                     f"{[*FIGURES, *CHILD_FIGURES]}. Fix: --only={next(iter(FIGURES))}")
    start = time.perf_counter()
    print(f"machine: {common.machine()}", flush=True)
    for name, (measure, report) in FIGURES.items():
        if not only or name in only:
            common.run_figure(name, measure, report, args.short,
                              os.path.join(args.out_dir, f"{name}.json"))
    for name in CHILD_FIGURES:
        if not only or name in only:
            run_child(name, args.short, args.out_dir)
    print(f"plot: {plot.plot(args.out_dir, args.plot)}")
    print(f"all figures: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
