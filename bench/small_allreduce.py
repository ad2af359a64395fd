"""Where a small allreduce's time goes: Horovod's cycle time and response cache.

  python bench/small_allreduce.py [--short] [--out runs/bench/small_allreduce.json]

One 2-rank launch per controller (horovodrun --gloo, then --mpi) runs
bench/small_allreduce_worker.py, which cycles through HOROVOD_CYCLE_TIME in
{0.1, 1, 5} ms x HOROVOD_CACHE_CAPACITY in {0, Horovod's default}, re-initialising
Horovod for each, in interleaved rounds. Per configuration and size (4 KiB, 64 KiB,
1 MiB): the median latency of one hvd.allreduce, eager and inside a tf.function (mpi4py
beside it under MPI), and the CPU seconds per second each rank burns while it sleeps
between allreduces. The spread is the range of the per-round medians. Our backend's
CPU-sharing default is cycle 5 ms with OMPI_MCA_mpi_yield_when_idle=1; the latter is
kept here for every MPI configuration, as training runs it.

Our build runs twice per controller: ranks free to run on every core, and ranks bound
each to its own core ("bound", the worker's --bind: what our program does for ranks that
share a host, horovod_train/cpus.py).

--baseline_site DIR adds another Horovod build beside ours, launch for launch in
alternating order: DIR is a directory Horovod was installed into with
`pip install --no-deps --target DIR <wheel>`, e.g. stock 0.28.1 without
scripts/horovod-patches (setup's first wheel cache, ~/.cache/horovod_train/wheels/).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

SIZES = (4 << 10, 64 << 10, 1 << 20)
CYCLES = ("0.1", "1", "5")
CACHES = ("0", "default")
TARGET_US = 1000.0


def measure(short: bool, baseline_site: str = "") -> dict:
    """Per build (ours, and the baseline's when given) and controller: the summarised
    worker JSON. The builds alternate launch by launch, so load drifts hit both."""
    configs = ",".join(f"{c}:{k}" for c in CYCLES for k in CACHES)
    opts = ["--rounds=2", "--iters=20", "--idle_s=1"] if short else \
        ["--rounds=4", "--iters=50", "--idle_s=2"]
    worker = [common.PY, os.path.join(common.ROOT, "bench", "small_allreduce_worker.py"),
              f"--configs={configs}", "--sizes=" + ",".join(map(str, SIZES))] + opts
    # build name -> (PYTHONPATH, extra worker flags); "bound" is our build with each rank
    # bound to its own core, as our program binds ranks that share a host (cpus.py).
    builds = {"ours": (common.ROOT, []), "bound": (common.ROOT, ["--bind"])}
    if baseline_site:
        site = os.pathsep.join([os.path.abspath(baseline_site), common.ROOT])
        builds["baseline"] = (site, [])
        builds["baseline bound"] = (site, ["--bind"])
    out = {"builds": {name: {"controllers": {}} for name in builds},
           "baseline_site": os.path.abspath(baseline_site) if baseline_site else None}
    with tempfile.TemporaryDirectory() as tmp:
        for controller in ("gloo", "mpi"):
            order = list(builds) if controller == "gloo" else list(reversed(builds))
            for name in order:
                path = os.path.join(tmp, f"{name}-{controller}.json")
                extra = ["--mpi"] if controller == "mpi" else []
                pythonpath, flags = builds[name]
                env = common.child_env(OMPI_MCA_mpi_yield_when_idle="1", PYTHONPATH=pythonpath)
                common.run(common.launcher(controller, 2) + worker + flags + extra +
                           [f"--out={path}"], timeout=900, env=env)
                with open(path) as f:
                    out["builds"][name]["controllers"][controller] = summarise(json.load(f))
    return out


def _us(values) -> float:
    return 1e6 * statistics.median(values)


def summarise(raw: dict) -> dict:
    """Per (cycle, cache, size, mode): the median of each round's median over both
    ranks' calls, with the min..max of those round medians; idle CPU per rank."""
    keyed = {}
    for run in raw["runs"]:
        key = (run["cycle_ms"], run["cache"])
        slot = keyed.setdefault(key, {"lat": {}, "idle": []})
        slot["idle"].append([r["idle_cpu_per_s"] for r in run["per_rank"]])
        for i, size in enumerate(SIZES):
            for mode in ("eager_s", "graph_s", "mpi4py_s"):
                calls = [v for r in run["per_rank"] for v in r["rows"][i].get(mode, [])]
                if calls:
                    slot["lat"].setdefault(f"{size}:{mode}", []).append(_us(calls))
    rows = []
    for (cycle, cache), slot in sorted(keyed.items()):
        lat = {k: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
               for k, v in slot["lat"].items()}
        idle = slot["idle"]
        rows.append({"cycle_ms": cycle, "cache": cache, "latency": lat,
                     "idle_cpu_per_s_per_rank": [statistics.median(col) for col in zip(*idle)],
                     "idle_cpu_rounds": idle})
    return {"env": raw["env"], "rows": rows,
            "idle_cpu_no_horovod_r0": raw.get("idle_cpu_no_horovod_r0")}


def _cell(lat: dict, key: str) -> str:
    got = lat.get(key)
    if got is None:
        return "-"
    return f"{got['median_us']:.0f} ({got['min_us']:.0f}-{got['max_us']:.0f})"


def report(r: dict) -> str:
    lines = []
    for build, got_build in r["builds"].items():
        where = {"baseline": r["baseline_site"],
                 "baseline bound": f"{r['baseline_site']}, each rank bound to its own core",
                 "bound": "this venv, each rank bound to its own core"}.get(build, "this venv")
        lines.append(f"== {build} Horovod ({where})")
        lines += _build_tables(got_build)
    for mine, other in (("ours", "bound"), ("ours", "baseline"), ("bound", "baseline bound")):
        if other in r["builds"]:
            lines += _comparison(r["builds"][mine], r["builds"][other], other, mine)
    lines.append(f"target: under {TARGET_US:.0f} us without idle CPU near 1 s/s (a spinning core)")
    return "\n".join(lines)


def _build_tables(got_build: dict) -> list:
    lines = []
    for controller, got in got_build["controllers"].items():
        headers = ["cycle ms", "cache"]
        modes = [("eager_s", "eager"), ("graph_s", "tf.fn")]
        if controller == "mpi":
            modes.append(("mpi4py_s", "mpi4py"))
        for size in SIZES:
            headers += [f"{common.size_label(size)} {name} us" for _, name in modes]
        headers.append("idle CPU s/s r0, r1")
        rows = []
        for row in got["rows"]:
            cells = [f"{row['cycle_ms']:g}", row["cache"]]
            for size in SIZES:
                cells += [_cell(row["latency"], f"{size}:{mode}") for mode, _ in modes]
            cells.append(", ".join(f"{v:.3f}" for v in row["idle_cpu_per_s_per_rank"]))
            rows.append(cells)
        lines += [f"{controller}: median latency of one allreduce, us (min-max of round "
                  f"medians), 2 ranks; env {got['env']}",
                  common.table(headers, rows),
                  f"idle CPU s/s of rank 0 with Horovod shut down: "
                  f"{got.get('idle_cpu_no_horovod_r0') or float('nan'):.3f}", ""]
    return lines


def _comparison(ours: dict, base: dict, name: str, mine: str = "ours") -> list:
    """One row per controller and cycle (Horovod's default cache): eager median us of
    arm `mine` / arm `name` per size, and both arms' idle CPU."""
    rows = []
    for controller, got in ours["controllers"].items():
        base_rows = {(x["cycle_ms"], x["cache"]): x for x in base["controllers"][controller]["rows"]}
        for row in got["rows"]:
            other = base_rows.get((row["cycle_ms"], row["cache"]))
            if row["cache"] != "default" or other is None:
                continue
            cells = [controller, f"{row['cycle_ms']:g}"]
            for size in SIZES:
                key = f"{size}:eager_s"
                cells.append(f"{row['latency'][key]['median_us']:.0f} / "
                             f"{other['latency'][key]['median_us']:.0f}")
            cells += [_idle(row), _idle(other)]
            rows.append(cells)
    headers = ["ctrl", "cycle ms"] + [f"{common.size_label(s)} us {mine} / {name}" for s in SIZES]
    return [f"{mine} beside {name} (eager, default cache, median us):",
            common.table(headers + [f"idle CPU {mine}", f"idle CPU {name}"], rows), ""]


def _idle(row: dict) -> str:
    return ", ".join(f"{v:.2f}" for v in row["idle_cpu_per_s_per_rank"])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the `make bench` version")
    parser.add_argument("--out", default=os.path.join(common.OUT_DIR, "small_allreduce.json"))
    parser.add_argument("--baseline_site", default="",
                        help="a directory holding another Horovod build to measure beside ours")
    args = parser.parse_args(argv)
    return common.run_figure("small_allreduce",
                             lambda short: measure(short, args.baseline_site),
                             report, args.short, args.out)


if __name__ == "__main__":
    main()
