"""M2: data-parallel efficiency, ours vs a bare Horovod loop, MPI and Gloo; our horovod
backend vs mwms; on resnet18_cifar (the headline) and digits_cnn; and gradient buckets
(overlap with backprop) vs one allreduce after the backward pass.

  python bench/scaling.py [--short | --smoke] [--out runs/bench/m2_scaling.json]

Efficiency = img/sec per rank with 2 ranks x 1 thread over img/sec with 1 rank x 1
thread (the 1-rank runs use horovodrun -np 1, the same launcher), in wall clock AND in
CPU-seconds per image (user + system of every rank, from the OS), which other
processes' load does not move; common.cost_split turns the two into the 1-rank work,
extra CPU work and waiting. Every run is repeated, interleaved (all configs of repeat
1, then of repeat 2, ...), so machine load hits all alike; the ranges are the
per-repeat figures' min..max. The bare loop keeps Horovod's defaults (none of our
CPU-sharing settings reach it); ours chooses its own. Targets: ours >= 0.93 on
resnet18_cifar, >= 0.90 on digits_cnn, Gloo and MPI (wall clock).
"""
import argparse
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, runs, scaling_report  # noqa: E402
from launch import contract  # noqa: E402

CONTROLLERS = ("gloo", "mpi")
BUCKETS = "ours/2/gloo/bucket4"  # buckets given explicitly, beside the unset default
UNBOUND = "ours/2/gloo/unbound"  # the same run with HOROVOD_TRAIN_CPU_BIND=none
SOLO1, SOLO2 = "solo/1", "solo/2"  # ours, --backend=local: 1 process, 2 at once (runs.solo)


@dataclasses.dataclass(frozen=True)
class Model:
    flags: list
    target: float
    batch: int
    interval: int  # steps per logged interval; the first traces, the rest are timed
    steps: dict  # version -> steps of our runs
    overlap: bool = False  # also run --allreduce_bucket_mb=4 beside the default (one call)

    @property
    def name(self) -> str:
        return runs.model_name(self.flags)


MODELS = (
    Model(runs.RESNET_FLAGS, 0.93, 32, 3, {"smoke": 6, "short": 12, "full": 21}, overlap=True),
    Model(runs.MODEL_FLAGS, 0.90, 64, runs.INTERVAL, {"smoke": 20, "short": 40, "full": 80}),
)
REPEATS = {"smoke": 1, "short": 2, "full": 3}
LABELS = {"ours/1": "ours, 1 rank", "bare/1": "bare Horovod, 1 rank",
          "ours/2/gloo": "ours, Gloo", "bare/2/gloo": "bare Horovod, Gloo",
          "ours/2/mpi": "ours, MPI", "bare/2/mpi": "bare Horovod, MPI",
          "mwms/2": "ours, mwms (RING/gRPC)", BUCKETS: "ours, Gloo, --allreduce_bucket_mb=4",
          UNBOUND: "ours, Gloo, HOROVOD_TRAIN_CPU_BIND=none",
          SOLO1: "ours, local, 1 process", SOLO2: "ours, local, 2 processes at once"}
# efficiency name -> (1-rank run, 2-rank run)
PAIRS = {"ours/gloo": ("ours/1", "ours/2/gloo"), "ours/mpi": ("ours/1", "ours/2/mpi"),
         "bare/gloo": ("bare/1", "bare/2/gloo"), "bare/mpi": ("bare/1", "bare/2/mpi"),
         "mwms": ("ours/1", "mwms/2"), "ours/gloo/bucket4": ("ours/1", BUCKETS),
         "ours/gloo/unbound": ("ours/1", UNBOUND), "ceiling": (SOLO1, SOLO2)}


def _one_repeat(m: Model, steps: int, only=()) -> dict:
    """Every config of model m once (or those named in `only`), each with the load
    average after it."""
    def ours(np_, controller, extra=(), env=None):
        return runs.ours(common.launcher(controller, np_), steps, extra=extra,
                         model=m.flags, interval=m.interval, env=env)

    def bare(np_, controller):
        return runs.bare(common.launcher(controller, np_), steps - m.interval, model=m.name,
                         batch_size=m.batch, interval=m.interval, warmup=m.interval)

    todo = {"ours/1": lambda: ours(1, "gloo"), "bare/1": lambda: bare(1, "gloo")}
    for c in CONTROLLERS:
        todo[f"ours/2/{c}"] = lambda c=c: ours(2, c)
        if c == "gloo":  # right beside the default they are compared with
            todo[UNBOUND] = lambda: ours(2, "gloo", env={contract.ENV_CPU_BIND: "none"})
        if m.overlap and c == "gloo":
            todo[BUCKETS] = lambda: ours(2, "gloo", ["--allreduce_bucket_mb=4"])
        todo[f"bare/2/{c}"] = lambda c=c: bare(2, c)
    todo["mwms/2"] = lambda: runs.mwms(2, runs.ours_flags(steps, model=m.flags,
                                                           interval=m.interval))
    for n, name in ((1, SOLO1), (2, SOLO2)):
        todo[name] = lambda n=n: runs.solo(n, steps, model=m.flags, interval=m.interval)
    out = {}
    for name, fn in todo.items():
        if only and name not in only:
            continue
        out[name] = fn()
        out[name]["load_after"] = common.load_average()
        print(f"  {m.name} {name}: {out[name]['rate']:.1f} img/s per rank, "
              f"{_ms(out[name]['cpu'])} CPU ms/img, load {out[name]['load_after']}", flush=True)
    return out


def _ms(cpu) -> str:
    return f"{1e3 * cpu:.1f}" if cpu is not None else "-"


def _model_figures(m: Model, reps: list) -> dict:
    eff = {name: common.efficiency([r[one] for r in reps], [r[two] for r in reps])
           for name, (one, two) in PAIRS.items() if one in reps[0] and two in reps[0]}
    return {"runs": reps, "efficiency": eff, "target": m.target, "batch": m.batch,
            "interval": m.interval,
            "comm_share": {name: scaling_report.comm_share(reps, name) for name in reps[0]},
            "met": {c: eff[f"ours/{c}"]["wall"] >= m.target for c in CONTROLLERS
                    if f"ours/{c}" in eff},
            "horovod_over_mwms": common.ratio(
                statistics.fmean(r["ours/2/gloo"]["rate"] for r in reps),
                statistics.fmean(r["mwms/2"]["rate"] for r in reps))
            if {"ours/2/gloo", "mwms/2"} <= reps[0].keys() else None,
            "ours_chose_defaults": all(r["ours/2/gloo"]["chosen_env"] for r in reps)
            if "ours/2/gloo" in reps[0] else None}


def measure(short: bool, smoke: bool = False, only=(), progress: str = "",
            runs_only=()) -> dict:
    version = "smoke" if smoke else "short" if short else "full"
    chosen = [m for m in MODELS if not only or m.name in only]
    reps = {m.name: [] for m in chosen}
    for _ in range(REPEATS[version]):  # interleaved: every config once per repeat
        for m in chosen:
            reps[m.name].append(_one_repeat(m, m.steps[version], runs_only))
            if progress:  # what a run cut short has measured (--from_progress)
                common.write_json(progress, {"version": version, "reps": reps})
    return figures(reps, version)


def figures(reps: dict, version: str) -> dict:
    """The figure from {model: [repeat, ...]}, each model from the repeats it completed
    (a run cut short may have one more of the first model than of the next)."""
    chosen = [m for m in MODELS if reps.get(m.name)]
    models = {m.name: {**_model_figures(m, reps[m.name]), "steps": m.steps[version]}
              for m in chosen}
    head = models[chosen[0].name]
    return {"models": models, "headline": chosen[0].name, "version": version,
            "repeats": REPEATS[version], "full_repeats": REPEATS["full"],
            # The headline's wall figures under the names older readers know.
            "efficiency": {k: v["wall"] for k, v in head["efficiency"].items()},
            "target": head["target"]}


def _from_progress(path: str) -> dict:
    with open(path) as f:
        saved = json.load(f)
    return {**figures(saved["reps"], saved["version"]), "from_progress": path}


def report(r: dict) -> str:
    return scaling_report.report(r, LABELS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the `make bench` version")
    parser.add_argument("--smoke", action="store_true",
                        help="one repeat, fewest steps: checks the script end to end")
    parser.add_argument("--models", default="", help="comma-separated, default all: "
                        + ",".join(m.name for m in MODELS))
    parser.add_argument("--out", default=os.path.join(common.OUT_DIR, "m2_scaling.json"))
    parser.add_argument("--runs", default="", help="comma-separated, default all: only these "
                        "runs, e.g. ours/1,solo/1,solo/2,ours/2/gloo,ours/2/mpi")
    parser.add_argument("--from_progress", default="", help="report the complete repeats of a "
                        "run cut short from its <out>.progress.json instead of measuring")
    args = parser.parse_args(argv)
    only = set(filter(None, args.models.split(",")))
    unknown = only - {m.name for m in MODELS}
    if unknown:
        parser.error(f"--models: received {sorted(unknown)}; expected names from "
                     f"{[m.name for m in MODELS]}. Fix: --models={MODELS[0].name}")

    def run(short):
        if args.from_progress:
            return _from_progress(args.from_progress)
        return measure(short, args.smoke, only, progress=f"{args.out}.progress.json",
                       runs_only=set(filter(None, args.runs.split(","))))
    return common.run_figure("m2_scaling", run, report, args.short or args.smoke, args.out)


if __name__ == "__main__":
    main()
