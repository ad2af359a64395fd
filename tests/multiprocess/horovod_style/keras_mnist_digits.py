"""A Keras training script as Horovod users write one, run by the tests on our API.

    horovodrun -np 2 -H localhost:2 --gloo python keras_mnist_digits.py --result=DIR/r{rank}.json

Our own script (the shape of Horovod's MNIST example, on scikit-learn's 8x8 digits so
that nothing is downloaded): GPU pinning by local rank, this rank's shard of the data,
the learning rate scaled by the number of ranks, hvd.DistributedOptimizer, Horovod's
three callbacks, a checkpoint written by rank 0 alone, progress printed by rank 0 alone.
At the end every rank writes its weights digest and test accuracy to --result.

--no_broadcast drops BroadcastGlobalVariablesCallback; each rank starts from its own
random weights either way (seeded by rank), so the ranks end identical only if the API
makes them so.
"""
import argparse
import hashlib
import json

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import keras
import horovod_train.keras as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--result", required=True, help="JSON path; {rank} becomes the rank")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--warmup_epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.002, help="per rank; scaled by hvd.size()")
    p.add_argument("--no_broadcast", action="store_true",
                   help="leave BroadcastGlobalVariablesCallback(0) out")
    return p.parse_args()


def pin_gpu():
    """One GPU per process, the one of this rank's local index (none on a CPU host)."""
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")


def load_data(rank, size):
    """(this rank's training shard, the whole test split): a fixed split of the 1797
    digits, images as 8x8x1 floats in [0, 1]; rank r takes every size-th sample from r."""
    digits = load_digits()
    x = (digits.images[..., np.newaxis] / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:1400], order[1400:]
    return (x[train][rank::size], y[train][rank::size]), (x[test], y[test])


def build_model():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ])


def make_callbacks(args, scaled_lr):
    callbacks = [] if args.no_broadcast else [
        # Rank 0's initial weights to every rank (ours start different on purpose).
        hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    callbacks += [
        # Epoch-end metrics averaged over the ranks, before anything reads them.
        hvd.callbacks.MetricAverageCallback(),
        # From lr / size up to the scaled lr over the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs, verbose=1),
    ]
    if hvd.rank() == 0:  # one writer: other ranks would overwrite the same files
        callbacks.append(keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.h5"))
    return callbacks


def weights_digest(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def main():
    args = parse_args()
    hvd.init()
    pin_gpu()
    (x, y), (x_test, y_test) = load_data(hvd.rank(), hvd.size())
    keras.utils.set_random_seed(100 + hvd.rank())  # different initial weights per rank
    model = build_model()
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                  metrics=["accuracy"])
    # The same number of steps on every rank (shards differ by a sample at most).
    steps = (1400 // hvd.size()) // args.batch_size
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=hvd.rank())
    dataset = dataset.repeat().batch(args.batch_size)
    model.fit(dataset, steps_per_epoch=steps, epochs=args.epochs,
              callbacks=make_callbacks(args, scaled_lr),
              verbose=1 if hvd.rank() == 0 else 0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    result = {"rank": hvd.rank(), "size": hvd.size(), "digest": weights_digest(model),
              "accuracy": float(accuracy), "lr": float(opt.learning_rate.numpy()),
              "steps": int(opt.iterations.numpy())}
    with open(args.result.format(rank=hvd.rank()), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
