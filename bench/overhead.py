"""M1: our 1-rank step time over plain Keras 3 model.fit (same model, batch, threads).

  python bench/overhead.py [--short] [--out runs/bench/m1_overhead.json]

Runs alternate (ours, fit, ours, fit, ...) so that load from other jobs hits both.
Ours is `python -m horovod_train --backend=local`, its own pipeline and fused step,
log sampling included; fit is bench/keras_fit.py, twice: as a user runs it (TF's default
CPU allocator) and with the CPU default our program chooses for itself on a CPU host
(TF's pooling allocator, runtime.choose_cpu_allocator), so that the second ratio is our
overhead alone. Target (issue 23): ours / fit step time <= 1.02.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, runs  # noqa: E402
from horovod_train import runtime  # noqa: E402

TARGET = 1.02
ARMS = {"keras_fit": "plain Keras model.fit",
        "keras_fit_pooled": "model.fit, with our CPU allocator choice"}


def measure(short: bool) -> dict:
    steps, repeats = (50, 1) if short else (90, 3)
    pooled = runtime.choose_cpu_allocator(environ={}, gpus=0)  # what ours sets here
    groups = {"ours": [], "keras_fit": [], "keras_fit_pooled": []}
    for _ in range(repeats):
        groups["ours"].append(runs.ours([], steps, extra=["--backend=local"]))
        groups["keras_fit"].append(runs.keras_fit(steps))
        groups["keras_fit_pooled"].append(runs.keras_fit(steps, env=pooled))
    merged = {name: {"per_rank": [r for run in group for r in run["per_rank"]], "ranks": 1}
              for name, group in groups.items()}
    rate = {name: common.mean_ci(run["per_rank"])[0] for name, run in merged.items()}
    return {"runs": groups, "merged": merged, "pooled_env": pooled,
            "step_time_ratio": common.ratio(rate["keras_fit"], rate["ours"]),
            "step_time_ratio_pooled": common.ratio(rate["keras_fit_pooled"], rate["ours"]),
            "target": TARGET, "jit_compile": groups["keras_fit"][0]["jit_compile"],
            "steps": steps, "repeats": repeats}


def report(r: dict) -> str:
    rows = [common.rate_row("ours (horovod_train, local)", r["merged"]["ours"])]
    rows += [common.rate_row(label, r["merged"][name]) for name, label in ARMS.items()
             if name in r["merged"]]  # results from before the pooled arm lack it
    lines = [f"M1 overhead: digits_cnn 32x32x3, batch 64, 1 thread, {r['repeats']} run(s) each",
             common.table(common.RATE_HEADERS, rows)]
    for key, against in (("step_time_ratio", "fit"), ("step_time_ratio_pooled", "pooled fit")):
        if key in r:
            verdict = "met" if r[key] <= TARGET else "MISSED"
            lines.append(f"step time ours / {against} = {r[key]:.3f} "
                         f"(target <= {TARGET}: {verdict})")
    lines.append(f"fit jit_compile={r['jit_compile']}; pooled fit adds "
                 f"{r.get('pooled_env') or 'nothing'}")
    return "\n".join(lines)


if __name__ == "__main__":
    common.main("m1_overhead", __doc__, measure, report)
