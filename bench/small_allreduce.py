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
"""
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


def measure(short: bool) -> dict:
    configs = ",".join(f"{c}:{k}" for c in CYCLES for k in CACHES)
    opts = ["--rounds=2", "--iters=20", "--idle_s=1"] if short else \
        ["--rounds=4", "--iters=50", "--idle_s=2"]
    worker = [common.PY, os.path.join(common.ROOT, "bench", "small_allreduce_worker.py"),
              f"--configs={configs}", "--sizes=" + ",".join(map(str, SIZES))] + opts
    env = common.child_env(OMPI_MCA_mpi_yield_when_idle="1")
    out = {"controllers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for controller in ("gloo", "mpi"):
            path = os.path.join(tmp, f"{controller}.json")
            extra = ["--mpi"] if controller == "mpi" else []
            common.run(common.launcher(controller, 2) + worker + extra + [f"--out={path}"],
                       timeout=900, env=env)
            with open(path) as f:
                out["controllers"][controller] = summarise(json.load(f))
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
    for controller, got in r["controllers"].items():
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
    lines.append(f"target: under {TARGET_US:.0f} us without idle CPU near 1 s/s (a spinning core)")
    return "\n".join(lines)


if __name__ == "__main__":
    common.main("small_allreduce", __doc__, measure, report)
