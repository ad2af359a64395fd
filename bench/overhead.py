"""M1: our 1-rank step time over plain Keras 3 model.fit (same model, batch, threads).

  python bench/overhead.py [--short] [--out runs/bench/m1_overhead.json]

Runs alternate (ours, fit, ours, fit, ...) so that load from other jobs hits both.
Ours is `python -m horovod_train --backend=local`, its own pipeline and fused step,
log sampling included; fit is bench/keras_fit.py. Target: ours / fit step time <= 1.05.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, runs  # noqa: E402

TARGET = 1.05


def measure(short: bool) -> dict:
    steps, repeats = (50, 1) if short else (90, 3)
    ours, fit = [], []
    for _ in range(repeats):
        ours.append(runs.ours([], steps, extra=["--backend=local"]))
        fit.append(runs.keras_fit(steps))
    merged = {name: {"per_rank": [r for run in group for r in run["per_rank"]], "ranks": 1}
              for name, group in (("ours", ours), ("keras_fit", fit))}
    o, f = (common.mean_ci(merged[k]["per_rank"])[0] for k in ("ours", "keras_fit"))
    return {"runs": {"ours": ours, "keras_fit": fit}, "merged": merged,
            "step_time_ratio": common.ratio(f, o), "target": TARGET,
            "jit_compile": fit[0]["jit_compile"], "steps": steps, "repeats": repeats}


def report(r: dict) -> str:
    rows = [common.rate_row("ours (horovod_train, local)", r["merged"]["ours"]),
            common.rate_row("plain Keras model.fit", r["merged"]["keras_fit"])]
    verdict = "met" if r["step_time_ratio"] <= TARGET else "MISSED"
    return (f"M1 overhead: digits_cnn 32x32x3, batch 64, 1 thread, {r['repeats']} run(s) each\n"
            f"{common.table(common.RATE_HEADERS, rows)}\n"
            f"step time ours / fit = {r['step_time_ratio']:.3f} (target <= {TARGET}: {verdict}; "
            f"fit jit_compile={r['jit_compile']})")


if __name__ == "__main__":
    common.main("m1_overhead", __doc__, measure, report)
