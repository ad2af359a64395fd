"""One rank of bench/keras_guard_overhead.py: the drop-in's divergence guard, timed
piece by piece inside model.fit on real ranks (digits_cnn on 32x32 synthetic images).

Prints one JSON line per rank: the median fit step with the guard off
(divergence_check_steps=0, no broadcast callback), the median step with the in-step
check every update (its cost, over the off step, is one check), and the median of the
epoch-end check as the broadcast callback runs it.
"""
import json
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

import horovod_train.keras as hvd
import keras
import models
from horovod_train.keras import divergence_guard, state

MODEL, STEPS, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


class StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times, self.start = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.start)


def fitted(check_steps):
    keras.utils.set_random_seed(0)
    model = models.get_model(MODEL, input_shape=(32, 32, 3), num_classes=10)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
                                                     divergence_check_steps=check_steps),
                  loss="sparse_categorical_crossentropy")
    return model


def main():
    hvd.init()
    rng = np.random.RandomState(hvd.rank())
    x = rng.rand(STEPS * 32, 32, 32, 3).astype("float32")
    y = rng.randint(0, 10, STEPS * 32)
    off, every = fitted(0), fitted(1)
    times = {"off": [], "every": []}
    for _ in range(ROUNDS):  # interleaved, so load changes hit both alike
        for name, model in (("off", off), ("every", every)):
            timer = StepTimes()
            model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[timer])
            times[name] += timer.times[2:]  # past the first steps' tracing
    strategy = state.active()
    checks = []
    for epoch in range(20):
        guard = divergence_guard.EpochGuard()  # a fresh one always checks
        start = time.perf_counter()
        guard.epoch_end(strategy, off, epoch)  # a fresh guard: its first end, checked
        checks.append(time.perf_counter() - start)
    print(json.dumps({"rank": hvd.rank(), "model": MODEL,
                      "step_off_s": statistics.median(times["off"]),
                      "step_every_s": statistics.median(times["every"]),
                      "epoch_check_s": statistics.median(checks)}), flush=True)


if __name__ == "__main__":
    tf.config.threading.set_intra_op_parallelism_threads(1)
    main()
