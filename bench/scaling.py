"""M2: data-parallel efficiency, ours vs a bare Horovod loop, MPI and Gloo; and our
horovod backend vs mwms on the same model.

  python bench/scaling.py [--short] [--out runs/bench/m2_scaling.json]

Efficiency = img/sec per rank with 2 ranks x 1 thread over img/sec with 1 rank x 1
thread (the 1-rank runs use horovodrun -np 1, the same launcher). Everything runs in
one invocation, interleaved per repeat, so machine load hits all alike. The bare
loop keeps Horovod's defaults (none of our CPU-sharing settings reach it); ours
chooses its own. Target: ours >= 0.93.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, runs  # noqa: E402

TARGET = 0.93
CONTROLLERS = ("gloo", "mpi")


def _one_repeat(steps: int, bare_steps: int) -> dict:
    out = {"ours/1": runs.ours(common.launcher("gloo", 1), steps),
           "bare/1": runs.bare(common.launcher("gloo", 1), bare_steps)}
    for c in CONTROLLERS:
        out[f"ours/2/{c}"] = runs.ours(common.launcher(c, 2), steps)
        out[f"bare/2/{c}"] = runs.bare(common.launcher(c, 2), bare_steps)
    out["mwms/2"] = runs.mwms(2, runs.ours_flags(steps))
    return out


def measure(short: bool) -> dict:
    steps, repeats = (40, 1) if short else (80, 2)
    per_repeat = [_one_repeat(steps, steps - 2 * runs.INTERVAL) for _ in range(repeats)]
    merged = {}
    for name in per_repeat[0]:
        group = [rep[name] for rep in per_repeat]
        merged[name] = {"per_rank": [v for g in group for v in g["per_rank"]],
                        "ranks": group[0]["ranks"]}
    mean = {k: common.mean_ci(v["per_rank"])[0] for k, v in merged.items()}
    efficiency = {f"{impl}/{c}": common.ratio(mean[f"{impl}/2/{c}"], mean[f"{impl}/1"])
                  for impl in ("ours", "bare") for c in CONTROLLERS}
    efficiency["mwms"] = common.ratio(mean["mwms/2"], mean["ours/1"])
    return {"runs": per_repeat, "merged": merged, "efficiency": efficiency,
            "horovod_over_mwms": common.ratio(mean["ours/2/gloo"], mean["mwms/2"]),
            "target": TARGET, "steps": steps, "repeats": repeats,
            "ours_chose_defaults": all(rep["ours/2/gloo"]["chosen_env"] for rep in per_repeat)}


def report(r: dict) -> str:
    labels = {"ours/1": "ours, 1 rank", "bare/1": "bare Horovod, 1 rank",
              "ours/2/gloo": "ours, Gloo", "bare/2/gloo": "bare Horovod, Gloo",
              "ours/2/mpi": "ours, MPI", "bare/2/mpi": "bare Horovod, MPI",
              "mwms/2": "ours, mwms (RING/gRPC)"}
    rows = [common.rate_row(labels[k], v) for k, v in r["merged"].items()]
    eff = r["efficiency"]
    eff_rows = [[c.upper() if c != "mwms" else "mwms", f"{eff.get('ours/' + c, eff.get(c)):.3f}",
                 f"{eff['bare/' + c]:.3f}" if c != "mwms" else "-"]
                for c in (*CONTROLLERS, "mwms")]
    met = all(eff[f"ours/{c}"] >= TARGET for c in CONTROLLERS)
    return (f"M2 scaling: digits_cnn 32x32x3, batch 64 per rank, 1 thread per rank, "
            f"{r['repeats']} repeat(s)\n{common.table(common.RATE_HEADERS, rows)}\n\n"
            f"{common.table(['efficiency 2 ranks / 1 rank', 'ours', 'bare Horovod'], eff_rows)}\n"
            f"target ours >= {TARGET}: {'met' if met else 'MISSED'}; ours logged its "
            f"CPU-sharing defaults: {r['ours_chose_defaults']}\n"
            f"horovod (Gloo) / mwms throughput = {r['horovod_over_mwms']:.2f}")


if __name__ == "__main__":
    common.main("m2_scaling", __doc__, measure, report)
