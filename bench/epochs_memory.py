"""Start-up and memory do not grow with --epochs (issue 46).

  python bench/epochs_memory.py [--short] [--out runs/bench/epochs_memory.json]

Runs issue 46's command, `horovodrun -np 2 -H localhost:2 --gloo python -m horovod_train
--epochs=1000 --max_steps=100000` (bundled digits, 22 steps an epoch: 100,000 steps end at
epoch 1000's last), beside `--epochs=1`, alternating. Each rank reports in summary.json the
seconds from its process start to the end of its first step and its peak RSS. Before the
fix every epoch's pipeline was built before step 1: 1,000 epochs ran no step in 9 minutes
and each rank grew to ~12 GB. Target: peak RSS and first step within 10% of --epochs=1's.
--short: 40 epochs (880 steps) instead of 1,000, one round.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

TARGET = 1.10
HEADERS = ("arm", "steps", "first step s (per rank)", "peak RSS MiB (per rank)", "wall s")


def _arm(epochs: int, max_steps: int) -> dict:
    summary, _ = common.train(common.launcher("gloo", 2),
                              [f"--epochs={epochs}", f"--max_steps={max_steps}"], timeout=1800)
    return {"epochs": epochs, "steps": summary["steps"], "wall_s": summary["wall_seconds"],
            "first_step_s": summary["first_step_after_s_per_rank"],
            "peak_rss_mb": summary["peak_rss_mb_per_rank"]}


def measure(short: bool) -> dict:
    many, rounds = (40, 1) if short else (1000, 2)
    arms = {"epochs=1": [], f"epochs={many}": []}
    for _ in range(rounds):
        arms["epochs=1"].append(_arm(1, 100000))
        arms[f"epochs={many}"].append(_arm(many, 100000))
    one, lots = arms["epochs=1"], arms[f"epochs={many}"]
    worst = lambda runs, key: max(v for run in runs for v in run[key])  # noqa: E731
    return {"arms": arms, "target": TARGET,
            "rss_ratio": common.ratio(worst(lots, "peak_rss_mb"), worst(one, "peak_rss_mb")),
            "first_step_ratio": common.ratio(worst(lots, "first_step_s"),
                                             worst(one, "first_step_s"))}


def report(r: dict) -> str:
    rows = []
    for name, runs in r["arms"].items():
        for run in runs:
            rows.append((f"--{name}", run["steps"],
                         " / ".join(f"{v:.1f}" for v in run["first_step_s"]),
                         " / ".join(f"{v:.0f}" for v in run["peak_rss_mb"]),
                         f"{run['wall_s']:.1f}"))
    lines = ["Start-up and memory against --epochs: horovodrun -np 2 --gloo, digits_cnn",
             common.table(HEADERS, rows)]
    for key, what in (("rss_ratio", "peak RSS"), ("first_step_ratio", "time to first step")):
        verdict = "met" if r[key] <= r["target"] else "MISSED"
        lines.append(f"{what}, many epochs / one (worst rank): {r[key]:.3f} "
                     f"(target <= {r['target']}: {verdict})")
    return "\n".join(lines)


if __name__ == "__main__":
    common.main("epochs_memory", __doc__, measure, report)
