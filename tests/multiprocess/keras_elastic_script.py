"""An elastic Keras script as Horovod users write one, run by tests/multiprocess/
test_keras_elastic.py on our API under elastic horovodrun:

    horovodrun -np 3 --min-np 2 --max-np 3 --host-discovery-script discover.sh --gloo \
        python keras_elastic_script.py --result_dir=DIR

Our own script in the shape of Horovod's examples/elastic/tensorflow2/
tensorflow2_keras_mnist_elastic.py, on scikit-learn's 8x8 digits (nothing is
downloaded): the state in memory (hvd.elastic.KerasState), a @hvd.elastic.run train()
that Horovod calls again after every re-formed ring, its three state callbacks, the
learning rate scaled to the new size on every reset. Each train() call takes this
rank's shard for the ring it runs in (rank and size may have changed).

At the end every rank writes DIR/<host>-<local rank>-<pid>.json: rank, size, epochs
done, weights digest, test accuracy, and one entry per train() call (the rank, size,
epoch and batch it started from).

A fault on request, for the test: with HT_KILL_HOST=<HOROVOD_HOSTNAME> and
HT_KILL_AT=<epoch>:<batch>, the rank on that host leaves at once (os._exit(1), no
clean-up) after that batch of that epoch (counted as state.epoch counts) - once:
it first creates HT_KILL_MARKER, and a worker that finds the file does not die.
HT_SLOW_BATCH_S=<seconds> makes every batch that much longer while the ring has fewer
ranks than HT_SLOW_WHILE_BELOW (default: always), so that a test has time to add a host
while the job trains, and the grown ring then runs at full speed.
"""
import argparse
import hashlib
import json
import os
import time

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import keras
import horovod_train.keras as hvd

TRAIN_SAMPLES = 1400


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--result_dir", required=True)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.002, help="per rank; scaled by hvd.size()")
    p.add_argument("--batches_per_commit", type=int, default=5)
    p.add_argument("--divergence_check_steps", type=int, default=None,
                   help="our DistributedOptimizer's in-step check of the ranks' weights "
                        "(not Horovod's); its default when not given")
    return p.parse_args()


def load_data():
    """(the 1400 training digits, the 397 test digits): a fixed split, 8x8 in [0, 1]."""
    digits = load_digits()
    x = (digits.images.reshape(-1, 64) / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:TRAIN_SAMPLES], order[TRAIN_SAMPLES:]
    return (x[train], y[train]), (x[test], y[test])


def build_model():
    return keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])


def weights_digest(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


class Faults(keras.callbacks.Callback):
    """The test's faults: os._exit(1) on the chosen host after the chosen batch (first
    time only), and slow batches."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        host, at = os.environ.get("HT_KILL_HOST"), os.environ.get("HT_KILL_AT")
        self.marker = os.environ.get("HT_KILL_MARKER", "")
        self.armed = bool(host and at and self.marker) and \
            os.environ.get("HOROVOD_HOSTNAME") == host and not os.path.exists(self.marker)
        self.at = tuple(int(v) for v in at.split(":")) if self.armed else None
        self.pause = float(os.environ.get("HT_SLOW_BATCH_S", "0"))
        self.slow_below = int(os.environ.get("HT_SLOW_WHILE_BELOW", "1000000"))

    def on_train_batch_end(self, batch, logs=None):
        if self.pause and hvd.size() < self.slow_below:
            time.sleep(self.pause)
        if self.armed and (self.state.epoch, batch) == self.at:
            with open(self.marker, "w") as f:
                f.write(f"rank {hvd.rank()} died after epoch {self.at[0]} batch {batch}\n")
            os._exit(1)


def main():
    args = parse_args()
    hvd.init()
    (x_all, y_all), (x_test, y_test) = load_data()
    keras.utils.set_random_seed(100 + hvd.rank())  # different initial weights per rank

    model = build_model()
    extra = {} if args.divergence_check_steps is None else \
        {"divergence_check_steps": args.divergence_check_steps}
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(args.lr * hvd.size()), **extra)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                  metrics=["accuracy"])

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def on_state_reset():
        # A new ring size: the learning rate follows it (rank 0's then reaches every rank
        # with the state at the sync that comes next).
        state.model.optimizer.learning_rate.assign(args.lr * hvd.size())

    state.register_reset_callbacks([on_state_reset])

    callbacks = [
        Faults(state),
        hvd.callbacks.MetricAverageCallback(),
        hvd.elastic.UpdateEpochStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
    ]
    entries = []

    @hvd.elastic.run
    def train(state):
        rank, size = hvd.rank(), hvd.size()
        entries.append({"rank": rank, "size": size, "epoch": state.epoch, "batch": state.batch,
                        "lr": float(keras.ops.convert_to_numpy(
                            state.model.optimizer.learning_rate))})
        x, y = x_all[rank::size], y_all[rank::size]
        # The same number of steps on every rank (shards differ by a sample at most).
        steps = (TRAIN_SAMPLES // size) // args.batch_size
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=rank)
        data = data.repeat().batch(args.batch_size)
        state.model.fit(data, steps_per_epoch=steps, epochs=args.epochs - state.epoch,
                        callbacks=callbacks, verbose=2 if rank == 0 else 0)

    train(state)

    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    result = {"rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch,
              "digest": weights_digest(model), "accuracy": float(accuracy),
              "attempts": len(entries), "entries": entries,
              "lr": float(keras.ops.convert_to_numpy(opt.learning_rate)),
              "iterations": int(keras.ops.convert_to_numpy(opt.iterations)),
              "host": os.environ.get("HOROVOD_HOSTNAME"), "pid": os.getpid()}
    name = f"{os.environ.get('HOROVOD_HOSTNAME', 'local')}-" \
           f"{os.environ.get('HOROVOD_LOCAL_RANK', '0')}-{os.getpid()}.json"
    with open(os.path.join(args.result_dir, name), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
