"""The baseline for M1: plain Keras 3 `model.fit`, as a user without us would write it.

  python bench/keras_fit.py --steps 60 --threads 1

Same model (digits_cnn on 32x32x3), optimizer (Adam 0.002), batch and threads as the
`horovod_train --backend=local` run it is compared with; random inputs from numpy
arrays; compile() with Keras's defaults (jit_compile='auto'). Prints one JSON line:
samples/s from the end of the warm-up steps to the end of the run.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--shape", default="32,32,3")
    p.add_argument("--steps", type=int, default=60, help="steps in all, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="steps left out of the rate")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (inter-op: 2 if >1)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras
    import models
    keras.utils.set_random_seed(42)
    shape = tuple(int(s) for s in args.shape.split(","))
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((args.steps * args.batch_size, *shape), dtype=np.float32)
    y = rng.integers(0, 10, len(x), dtype=np.int32)
    model = models.get_model("digits_cnn", input_shape=shape, num_classes=10)
    model.compile(optimizer=keras.optimizers.Adam(0.002),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    stamps = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: stamps.append(time.perf_counter()))
    model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=True, verbose=0,
              callbacks=[clock])
    timed = len(stamps) - args.warmup
    rate = timed * args.batch_size / (stamps[-1] - stamps[args.warmup - 1])
    print(json.dumps({"samples_per_sec": rate, "steps": len(stamps),
                      "jit_compile": bool(model.jit_compile)}), flush=True)


if __name__ == "__main__":
    main()
