"""Issue 40's overhead: a GradientTape loop through horovod_train.tensorflow against
the same loop with a hand-written grouped_allreduce, 2 ranks on one Horovod build.

  python bench/tape_overhead.py [--short] [--out runs/bench/tape_overhead.json]

Both variants run in the same processes, interleaved round by round
(bench/tape_worker.py), so the host's load hits both alike; the figure is the ratio of
their median step times (the slower rank's median, as a step waits for it). Target:
ours / hand-written <= 1.02. Per round medians are kept too, to show the spread.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

TARGET = 1.02
# (controller, gradient buckets): the backend's rule (one call under Gloo with ranks
# sharing a host's cores, buckets under MPI: backends/horovod.py unset_bucket_mb), and
# under MPI one call too, which is what the hand-written loop makes.
CASES = (("gloo", "rule"), ("mpi", "rule"), ("mpi", "0"))
BUCKETS = {"rule": "the backend's rule", "0": "one call"}


def measure(short: bool) -> dict:
    rows = []
    for model, steps, rounds in (("digits_cnn", 20 if short else 40, 3 if short else 6),
                                 ("resnet18_cifar", 3 if short else 5, 2 if short else 4)):
        worker = os.path.join(common.ROOT, "bench", "tape_worker.py")
        for controller, bucket_mb in CASES:
            out = common.run(common.launcher(controller, 2) + [
                common.PY, worker, model, str(steps), str(rounds), bucket_mb], timeout=1800)
            rows.append(_row(model, controller, bucket_mb, common.json_lines(out)))
    return {"rows": rows, "target": TARGET}


def _row(model, controller, bucket_mb, ranks) -> dict:
    def slowest(name):
        return max(r[f"{name}_ms"] for r in ranks)
    tape, hand = slowest("tape"), slowest("hand")
    first = next(r for r in ranks if r["rank"] == 0)
    per_round = [t / h for t, h in zip(first["tape_rounds_ms"], first["hand_rounds_ms"])]
    return {"model": model, "controller": controller, "buckets": BUCKETS[bucket_mb],
            "tape_ms": tape, "hand_ms": hand,
            "ratio": tape / hand, "round_ratios": [round(r, 3) for r in per_round]}


def report(result) -> str:
    headers = ["model", "controller", "our buckets", "DistributedGradientTape ms",
               "hand-written ms", "ratio", "per-round ratios (rank 0)"]
    rows = [[r["model"], r["controller"], r["buckets"], f"{r['tape_ms']:.1f}",
             f"{r['hand_ms']:.1f}",
             f"{r['ratio']:.3f}", ", ".join(f"{x:.2f}" for x in r["round_ratios"])]
            for r in result["rows"]]
    return ("GradientTape step: hvd.DistributedGradientTape against a hand-written "
            f"grouped_allreduce, 2 ranks, target <= {TARGET}\n" + common.table(headers, rows))


if __name__ == "__main__":
    common.main("tape_overhead", __doc__, measure, report)
