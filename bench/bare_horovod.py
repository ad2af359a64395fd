"""The baseline for M2: a custom training loop written the way Horovod's TF2 examples
write one, with Horovod's defaults. Run it under horovodrun or mpirun (or alone).

  horovodrun -np 2 -H localhost:2 --gloo python bench/bare_horovod.py --steps 60

It trains the same model on the same shapes as our program (--model from models/:
digits_cnn or resnet18_cifar on 32x32x3, Adam at 0.002 x size) on one fixed random
batch, as Horovod's synthetic benchmark does, and prints one JSON line: img/sec per
logging interval on this rank, and this rank's user + system CPU seconds (os.times)
over the timed steps with their wall seconds and images.
Nothing here is ours: no CPU-sharing defaults, no pipeline, no fused step.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="digits_cnn", help="a name from models/")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--shape", default="32,32,3")
    p.add_argument("--steps", type=int, default=60, help="timed steps after warm-up")
    p.add_argument("--interval", type=int, default=10, help="steps per reported rate")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads")
    p.add_argument("--out_dir", default="", help="each rank also writes rank<N>.json here")
    args = p.parse_args(argv)
    if args.warmup < 1:  # the first step broadcasts rank 0's state
        p.error(f"--warmup: received {args.warmup}; expected at least 1. Fix: --warmup=1")
    return args


def main(argv=None):
    args = parse(argv)
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import horovod.tensorflow as hvd
    import keras
    import models
    hvd.init()

    shape = tuple(int(s) for s in args.shape.split(","))
    model = models.get_model(args.model, input_shape=shape, num_classes=10)
    # Horovod's recipe: scale the learning rate by the number of workers.
    opt = keras.optimizers.Adam(0.002 * hvd.size())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    data = tf.random.uniform([args.batch_size, *shape])
    target = tf.random.uniform([args.batch_size], maxval=10, dtype=tf.int64)
    # Keras 3 variables wrap a tf.Variable; the tape and Horovod need the wrapped one.
    variables = [v.value for v in model.trainable_variables]

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # Broadcast after the first step, once the optimizer's slots exist.
        if first_batch:
            hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
            hvd.broadcast_variables([v.value for v in opt.variables], root_rank=0)
        return loss

    for i in range(args.warmup):
        loss = training_step(data, target, i == 0)
    float(loss)  # the warm-up has finished before the clocks start
    rates, cpu_start, wall_start = [], os.times(), time.perf_counter()
    for _ in range(args.steps // args.interval):
        start = time.perf_counter()
        for _ in range(args.interval):
            loss = training_step(data, target, False)
        float(loss)  # wait for the last step of the interval
        rates.append(args.batch_size * args.interval / (time.perf_counter() - start))
    cpu_end, wall = os.times(), time.perf_counter() - wall_start
    cpu_s = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    result = json.dumps({"rank": hvd.rank(), "size": hvd.size(), "img_per_sec": rates,
                         "cpu_s": cpu_s, "seconds": wall, "model": args.model,
                         "images": args.batch_size * args.interval * len(rates),
                         "env": {k: os.environ.get(k) for k in
                                 ("HOROVOD_CYCLE_TIME", "OMPI_MCA_mpi_yield_when_idle")}})
    print(result, flush=True)
    if args.out_dir:  # launchers may interleave the ranks' stdout lines
        with open(os.path.join(args.out_dir, f"rank{hvd.rank()}.json"), "w") as f:
            f.write(result)


if __name__ == "__main__":
    main()
