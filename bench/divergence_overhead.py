"""The divergence guard's cost: one cross-rank weight check against the train step.

  python bench/divergence_overhead.py [--short] [--out runs/bench/divergence_overhead.json]

One process, local backend, fp32, the fused step (as bench/xla.py builds it). For each
model: the step time (median of blocks), the time of one check as the trainer runs it
(divergence.check: the checksum of the trainable weights, the gather, the comparison;
the allgather of size x 2 floats is a stand-in without a wire here, the same size as
the metrics gather every log interval already pays), and the ratio of an epoch's step time with
the check at its end to the same epoch without it. Target: <= 1.01 at the default
(epoch ends only). The last column is the smallest --divergence_check_steps that keeps
the check within 1% of step time. Unlike the other figures this one runs TensorFlow in
the orchestrating process itself: there is nothing to launch.
"""
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from bench.xla import fused_step  # noqa: E402

TARGET = 1.01
RANKS = 2  # the epoch per rank shrinks with the world size; 2 is what this host runs
# (model, input shape, batch per rank, training examples of its dataset)
MODELS = [("digits_cnn", (32, 32, 3), 64, 1437),  # sklearn digits' training split
          ("resnet18_cifar", (32, 32, 3), 32, 50000)]  # CIFAR-10
SETTINGS = {True: {"rounds": 3, "steps": {"digits_cnn": 20, "resnet18_cifar": 3}, "checks": 5},
            False: {"rounds": 5, "steps": {"digits_cnn": 50, "resnet18_cifar": 8},
                    "checks": 15}}


def _step_seconds(step, batch, steps) -> float:
    x, y, no = batch
    start = time.perf_counter()
    for _ in range(steps):
        loss, _, _ = step.fused(x, y, *no)
    float(loss)  # waits for the last step
    return (time.perf_counter() - start) / steps


def _mirror_ring():
    """This process as rank 0 of RANKS whose peers all hold its weights: the allgather a
    real ring would return for that, with no wire. divergence.check runs only on a
    communicator that reaches peers (a one-process one returns at once, and a check timed
    that way measured nothing), so this one says it does."""
    import tensorflow as tf
    from horovod_train.backends.base import ProcessInfo
    from horovod_train.backends.comm import Communicator
    from horovod_train.backends.local import LocalBackend

    class MirrorComm(Communicator):
        reaches_peers = True

        def allgather(self, tensor):
            return tf.tile(tf.convert_to_tensor(tensor), [RANKS, 1])
    ring = LocalBackend()
    ring.setup()
    ring.info = ProcessInfo(0, RANKS)
    ring.comm = MirrorComm(ring)
    return ring


def _check_seconds(ring, variables) -> float:
    """One divergence.check as the trainer runs it (it passes: the peers agree)."""
    from horovod_train import divergence
    start = time.perf_counter()
    rows = divergence.check(ring, variables, 0, "the benchmark")
    seconds = time.perf_counter() - start
    if rows is None:
        raise SystemExit("divergence_overhead: divergence.check returned without comparing "
                         "(it saw no peers), so there is nothing to time; expected the mirror "
                         "ring to reach peers. Fix: _mirror_ring's communicator")
    return seconds


def _one_model(name, shape, batch, examples, settings) -> dict:
    import tensorflow as tf
    step = fused_step(name, shape)
    data = (tf.random.stateless_uniform([batch, *shape], seed=[1, 2]),
            tf.random.stateless_uniform([batch], seed=[3, 4], maxval=10, dtype=tf.int32),
            (tf.constant(False), tf.constant(0.0)))  # no poison, no stop vote
    variables, ring = step.model.trainable_variables, _mirror_ring()
    _step_seconds(step, data, 1)  # traces
    first_check_s = _check_seconds(ring, variables)  # traces the checksum
    steps_s, checks_s = [], []
    for _ in range(settings["rounds"]):  # alternating, so load from other jobs hits both
        steps_s.append(_step_seconds(step, data, settings["steps"][name]))
        checks_s += [_check_seconds(ring, variables) for _ in range(settings["checks"])]
    step_s, check_s = statistics.median(steps_s), statistics.median(checks_s)
    per_epoch = examples // (batch * RANKS)
    return {"model": name, "input_shape": list(shape), "batch": batch,
            "params": int(sum(math.prod(v.shape) for v in variables)),
            "step_s": step_s, "check_s": check_s, "first_check_s": first_check_s,
            "steps_per_epoch": per_epoch,
            "epoch_ratio": (per_epoch * step_s + check_s) / (per_epoch * step_s),
            "check_in_steps": check_s / step_s,
            "steps_for_1pct": math.ceil(check_s / step_s / (TARGET - 1)),
            "step_blocks_s": steps_s, "check_samples_s": checks_s}


def measure(short: bool) -> dict:
    settings = SETTINGS[short]
    rows = [_one_model(*spec, settings) for spec in MODELS]
    return {"models": rows, "ranks": RANKS, "target": TARGET, **settings}


def report(r: dict) -> str:
    rows = [[x["model"], f"{x['params']:,}", x["batch"], f"{1e3 * x['step_s']:.1f}",
             f"{1e3 * x['check_s']:.2f}", f"{x['check_in_steps']:.3f}", x["steps_per_epoch"],
             f"{x['epoch_ratio']:.5f}", x["steps_for_1pct"]] for x in r["models"]]
    worst = max(x["epoch_ratio"] for x in r["models"])
    verdict = "met" if worst <= TARGET else "MISSED"
    return (f"Divergence guard overhead: one process, local backend, fp32, fused step; "
            f"medians of {r['rounds']} alternating rounds; epochs per rank at "
            f"{r['ranks']} ranks\n"
            + common.table(["model", "trainable", "batch", "step ms", "check ms",
                            "check / step", "steps/epoch", "epoch with / without check",
                            "N for <= 1%"], rows)
            + f"\nepoch ends (the default): worst ratio {worst:.5f} (target <= {TARGET}: "
            f"{verdict}); N for <= 1% = the smallest --divergence_check_steps whose checks "
            f"cost at most 1% of step time")


if __name__ == "__main__":
    common.main("divergence_overhead", __doc__, measure, report)
