"""XLA on CPU: our fused train step with and without --jit_compile, side by side.

  python bench/xla.py [--short] [--out runs/bench/xla.json]

One child process (TensorFlow never runs in this orchestrating one) builds, for each
model, the same step twice on the local backend - StepOptions(jit_compile=False) and
(jit_compile=True), the same initial weights, the same in-memory batch - and times
them in alternating blocks (plain, xla, plain, xla, ...) so that load from other jobs
hits both alike. Step time is a block's wall time over its steps (median of the
blocks); the first call of each, which traces and (with XLA) compiles, is reported
apart. ratio = xla / plain step time: below 1, XLA is faster. No GPU is involved:
--jit_compile=auto keeps XLA off on CPU, and these figures are why.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

# (model, input shape, batch per step): digits_cnn as the M2 figures run it, and the
# CIFAR ResNet-18 at a batch a 2-core host steps through in about a second.
MODELS = [("digits_cnn", (32, 32, 3), 64), ("resnet18_cifar", (32, 32, 3), 32)]
SETTINGS = {True: {"rounds": 3, "steps": {"digits_cnn": 20, "resnet18_cifar": 3}},
            False: {"rounds": 5, "steps": {"digits_cnn": 50, "resnet18_cifar": 8}}}


def measure(short: bool) -> dict:
    out = common.run([common.PY, os.path.abspath(__file__), "--worker",
                      f"--settings={json.dumps(SETTINGS[short])}"], timeout=3600)
    rows = common.json_lines(out)
    for row in rows:
        row["ratio"] = common.ratio(row["xla_s"], row["plain_s"])
    return {"models": rows, **SETTINGS[short]}


def report(r: dict) -> str:
    rows = [[x["model"], "x".join(map(str, x["input_shape"])), x["batch"],
             f"{1e3 * x['plain_s']:.1f}", f"{1e3 * x['xla_s']:.1f}", f"{x['ratio']:.2f}",
             f"{x['plain_first_s']:.1f}", f"{x['xla_first_s']:.1f}",
             f"{x['relative_weight_gap']:.1e}"] for x in r["models"]]
    return (f"XLA on CPU: one process, local backend, fp32, fused step; medians of "
            f"{r['rounds']} alternating blocks per variant\n"
            + common.table(["model", "input", "batch", "plain ms/step", "xla ms/step",
                            "xla/plain", "plain 1st call s", "xla 1st call s",
                            "weight gap"], rows)
            + "\nweight gap = |plain - xla| / |plain| over all weights after "
            + ", ".join(f"{x['steps_each']} ({x['model']})" for x in r["models"])
            + " identical steps from the same start")


# --- the child: both steps in one process --------------------------------------------

def fused_step(model_name, shape, jit=False):
    """The fused TrainStep of a zoo model on the local backend (one process), as the
    XLA and divergence-guard benchmarks time it."""
    import keras
    import models
    from horovod_train.backends.local import LocalBackend
    from horovod_train.step import StepOptions, TrainStep
    keras.utils.set_random_seed(0)
    backend = LocalBackend()
    backend.setup()
    model = models.get_model(model_name, input_shape=shape, num_classes=10)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return TrainStep(model, optimizer, backend, StepOptions(jit_compile=jit))


def _block(step, x, y, no, steps) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loss, _, _ = step.fused(x, y, *no)
    float(loss)  # waits for the last step
    return (time.perf_counter() - start) / steps


def worker(settings: dict):
    import numpy as np
    import tensorflow as tf
    for name, shape, batch in MODELS:
        steps = {jit: fused_step(name, shape, jit) for jit in (False, True)}
        # The same start for both (the seed alone does not give ResNet the same weights).
        steps[True].model.set_weights(steps[False].model.get_weights())
        x = tf.random.stateless_uniform([batch, *shape], seed=[1, 2])
        y = tf.random.stateless_uniform([batch], seed=[3, 4], maxval=10, dtype=tf.int32)
        no = (tf.constant(False), tf.constant(0.0))  # no poison, no stop vote
        first = {jit: _block(step, x, y, no, 1) for jit, step in steps.items()}
        times = {False: [], True: []}
        for _ in range(settings["rounds"]):
            for jit, step in steps.items():
                times[jit].append(_block(step, x, y, no, settings["steps"][name]))
        # Both made the same updates from the same start on the same batch: how far apart
        # XLA's numerics drift, as |plain - xla| / |plain| over all the weights together
        # (per tensor, near-zero BatchNorm betas would magnify float rounding).
        plain, xla = (np.concatenate([np.ravel(w) for w in steps[jit].model.weights])
                      for jit in (False, True))
        gap = float(np.linalg.norm(plain - xla) / np.linalg.norm(plain))
        print(json.dumps({"model": name, "input_shape": list(shape), "batch": batch,
                          "plain_s": statistics.median(times[False]),
                          "xla_s": statistics.median(times[True]),
                          "plain_blocks_s": times[False], "xla_blocks_s": times[True],
                          "plain_first_s": first[False], "xla_first_s": first[True],
                          "relative_weight_gap": gap,
                          "steps_each": 1 + settings["rounds"] * settings["steps"][name]}),
              flush=True)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--worker", action="store_true")
        parser.add_argument("--settings", required=True)
        worker(json.loads(parser.parse_args().settings))
    else:
        common.main("xla", __doc__, measure, report)
