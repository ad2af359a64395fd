"""The drop-in's divergence guard against the step it guards, on 2 real ranks.

  python bench/keras_guard_overhead.py [--short] [--out runs/bench/keras_guard_overhead.json]

The guard has two checks (horovod_train/keras/divergence_guard.py): at epoch ends (the
first, then those crossing a multiple of 100 updates) and at the end of training (the
broadcast callbacks), and
inside the step every `divergence_check_steps` updates (default 1000). The worker (bench/keras_guard_worker.py) times model.fit's step with the
guard off and with the in-step check on EVERY update, and the epoch-end check by
itself; the overhead at the defaults is then computed from those parts:

  overhead = (epoch-end check / max(steps per epoch, 100) + in-step check / 1000)
             / step time,
  in-step check = step with a check every update - step with none.

Measuring the parts instead of two whole runs keeps the figure out of the host's
noise: on 2 shared cores whole-run times move by more than the 1% target.
Steps per epoch: sklearn digits' training split (1437 images) at batch 32 per rank.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from horovod_train import divergence  # noqa: E402  (TF-free: the rules' numbers)

DEFAULT_CHECK_STEPS = divergence.DEFAULT_IN_STEP_CHECK_STEPS
MIN_UPDATES = divergence.MIN_STEPS_BETWEEN_EPOCH_CHECKS
STEPS_PER_EPOCH = {"digits_cnn": 1437 // (32 * 2), "resnet18_cifar": 50000 // (32 * 2)}
TARGET = 0.01


def measure(short: bool) -> dict:
    rows = []
    for model, steps, rounds in (("digits_cnn", 20 if short else 40, 2 if short else 4),
                                 ("resnet18_cifar", 4 if short else 8, 2 if short else 3)):
        worker = os.path.join(common.ROOT, "bench", "keras_guard_worker.py")
        out = common.run(common.launcher("gloo", 2) + [common.PY, worker, model, str(steps),
                                                        str(rounds)], timeout=1800)
        ranks = common.json_lines(out)
        rows.append(_row(model, ranks))
    return {"rows": rows, "target": TARGET}


def _row(model, ranks) -> dict:
    step = max(r["step_off_s"] for r in ranks)
    in_step = max(0.0, max(r["step_every_s"] for r in ranks) - step)
    epoch_check = max(r["epoch_check_s"] for r in ranks)
    per_step = (epoch_check / max(STEPS_PER_EPOCH[model], MIN_UPDATES)
                + in_step / DEFAULT_CHECK_STEPS)
    return {"model": model, "step_ms": step * 1e3, "in_step_check_ms": in_step * 1e3,
            "epoch_check_ms": epoch_check * 1e3, "steps_per_epoch": STEPS_PER_EPOCH[model],
            "overhead": per_step / step}


def report(result) -> str:
    headers = ["model", "step ms", "in-step check ms", "epoch-end check ms",
               "steps/epoch", "overhead at defaults"]  # epoch checks: >= 100 updates apart
    rows = [[r["model"], f"{r['step_ms']:.1f}", f"{r['in_step_check_ms']:.2f}",
             f"{r['epoch_check_ms']:.1f}", r["steps_per_epoch"], f"{100 * r['overhead']:.3f}%"]
            for r in result["rows"]]
    return ("Divergence guard of the Keras drop-in, 2 ranks (horovodrun --gloo), target "
            f"<= {100 * TARGET:.0f}% of step time\n" + common.table(headers, rows))


if __name__ == "__main__":
    common.main("keras_guard_overhead", __doc__, measure, report)
