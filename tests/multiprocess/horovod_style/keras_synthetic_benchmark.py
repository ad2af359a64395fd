"""A synthetic throughput benchmark as Horovod users write one, run by the tests on our API.

    horovodrun -np 2 -H localhost:2 --gloo python keras_synthetic_benchmark.py \
        --result=DIR/r{rank}.json [--fp16_allreduce]

Our own script (the shape of Horovod's synthetic benchmarks): a small conv net on random
images, hvd.DistributedOptimizer (fp16 compression of the gradients with
--fp16_allreduce), warm-up batches, then timeit of model.train_on_batch per iteration;
every rank's img/sec is averaged with hvd.allreduce and rank 0 alone prints the totals.
Every rank writes its weights digest to --result.

train_on_batch runs no callbacks, so rank 0's weights reach the others by hvd.broadcast
of each weight after the first step (horovod.tensorflow.keras has no broadcast_variables;
each rank starts from its own random weights, seeded by rank).
"""
import argparse
import hashlib
import json
import timeit

import numpy as np
import tensorflow as tf

import keras
import horovod_train.keras as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--result", required=True, help="JSON path; {rank} becomes the rank")
    p.add_argument("--fp16_allreduce", action="store_true",
                   help="compress gradients to float16 for the allreduce")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--num_warmup_batches", type=int, default=2)
    p.add_argument("--num_batches_per_iter", type=int, default=3)
    p.add_argument("--num_iters", type=int, default=3)
    return p.parse_args()


def build_model(image_size, classes=10):
    return keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes, activation="softmax"),
    ])


def log(text):
    if hvd.rank() == 0:  # the other ranks print nothing
        print(text, flush=True)


def weights_digest(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    keras.utils.set_random_seed(200 + hvd.rank())  # own weights and data per rank
    model = build_model(args.image_size)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), compression=compression)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt)
    data = np.random.uniform(size=(args.batch_size, args.image_size, args.image_size, 3))
    data = data.astype(np.float32)
    target = np.random.randint(0, 10, size=(args.batch_size, 1)).astype(np.int64)

    model.train_on_batch(data, target)  # builds the optimizer's state, then rank 0's wins
    model.set_weights([hvd.broadcast(w, root_rank=0, name=f"weight_{i}")
                       for i, w in enumerate(model.get_weights())])
    log(f"Model: small conv net, batch size {args.batch_size}, {hvd.size()} ranks, "
        f"fp16 allreduce: {args.fp16_allreduce}")
    timeit.timeit(lambda: model.train_on_batch(data, target), number=args.num_warmup_batches)
    rates = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(lambda: model.train_on_batch(data, target),
                                number=args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / seconds)
        log(f"Iter #{i}: {rates[-1]:.1f} img/sec per rank")
    mean = float(hvd.allreduce(tf.constant(np.mean(rates)), name="img_sec"))  # averaged
    log(f"Img/sec per rank: {mean:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f}")
    with open(args.result.format(rank=hvd.rank()), "w") as f:
        json.dump({"rank": hvd.rank(), "digest": weights_digest(model),
                   "steps": int(opt.iterations.numpy()), "img_sec": mean}, f)


if __name__ == "__main__":
    main()
