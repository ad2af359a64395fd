"""One rank of bench/tape_overhead.py: a GradientTape step through
horovod_train.tensorflow's DistributedGradientTape against the same step with the
gradients reduced by a hand-written horovod.tensorflow.grouped_allreduce, on the same
Horovod build, in the same process, interleaved round by round.

Prints one short JSON line per rank (mpirun cuts a line at 2048 characters): each
variant's median step time (ms) over all rounds and per round, past the tracing steps.
"""
import json
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

import horovod_train.keras as htk
import horovod_train.tensorflow as hvd
import keras
import models

MODEL, STEPS, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
BUCKET_MB = sys.argv[4] if len(sys.argv) > 4 else "rule"  # "rule": the backend's own
BATCH, WARMUP = 32, 3


def variant(reduce_with_tape):
    """A compiled step: the model and optimizer of its own, one reduction path."""
    import horovod.tensorflow as native  # joined by hvd.init() under horovodrun
    keras.utils.set_random_seed(0)
    model = models.get_model(MODEL, input_shape=(32, 32, 3), num_classes=10)
    opt = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if reduce_with_tape:
            grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        else:
            grads = native.grouped_allreduce(tape.gradient(loss, model.trainable_variables),
                                             op=native.Average)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def main():
    if BUCKET_MB != "rule":  # joined with these options, which hvd.init() then keeps
        htk.Strategy(bucket_mb=float(BUCKET_MB))
    hvd.init()
    rng = np.random.RandomState(hvd.rank())
    x = tf.constant(rng.rand(BATCH, 32, 32, 3).astype("float32"))
    y = tf.constant(rng.randint(0, 10, BATCH))
    steps = {"tape": variant(True), "hand": variant(False)}
    times = {name: [] for name in steps}
    for name, step in steps.items():
        for _ in range(WARMUP):  # tracing and the first-call broadcast
            float(step(x, y))
    rounds = {name: [] for name in steps}
    for _ in range(ROUNDS):  # interleaved, so load changes hit both alike
        for name, step in steps.items():
            these = []
            for _ in range(STEPS):
                start = time.perf_counter()
                float(step(x, y))
                these.append(time.perf_counter() - start)
            times[name] += these
            rounds[name].append(round(statistics.median(these) * 1e3, 2))
    result = {"rank": hvd.rank(), "model": MODEL, "bucket_mb": BUCKET_MB}
    for name in steps:
        result.update({f"{name}_ms": statistics.median(times[name]) * 1e3,
                       f"{name}_rounds_ms": rounds[name]})
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    tf.config.threading.set_intra_op_parallelism_threads(1)
    main()
