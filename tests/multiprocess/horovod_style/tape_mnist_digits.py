"""A GradientTape training script as Horovod users write one, run by the tests on our API.

    horovodrun -np 2 -H localhost:2 --gloo python tape_mnist_digits.py --result=DIR/r{rank}.json

Our own script with the shape of Horovod's TF2 MNIST example (scikit-learn's 8x8 digits,
so nothing is downloaded): hvd.init, this rank's shard, the learning rate scaled by the
rank count, a tf.function step with hvd.DistributedGradientTape and, at the first batch,
hvd.broadcast_variables of the model and the optimizer (`opt.variables`, a property in
Keras 3), loss printed and a checkpoint written by rank 0 alone.

Then, in the same launch: the tensor API's collectives (their results into --result),
and a drift: one rank changes a weight on its own, and the tape's divergence guard must
stop the next checked step on every rank with the guard's one line.

--no_broadcast leaves the first-batch broadcast out; each rank starts from its own
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
import horovod_train.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--result", required=True, help="JSON path; {rank} becomes the rank")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.002, help="per rank; scaled by hvd.size()")
    p.add_argument("--check_every", type=int, default=4, help="the guard's period, in steps")
    p.add_argument("--no_broadcast", action="store_true")
    return p.parse_args()


def load_data(rank, size):
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
        keras.layers.Dense(10, activation="softmax"),
    ])


def weights_digest(model):
    h = hashlib.sha256()
    for w in model.trainable_weights:
        h.update(np.ascontiguousarray(keras.ops.convert_to_numpy(w)).tobytes())
    return h.hexdigest()


def collectives():
    """What each collective returns here, with values that tell rank from rank."""
    rank, size = hvd.rank(), hvd.size()
    mine = tf.fill([rank + 1, 2], float(rank))  # rank r holds r+1 rows
    out = {
        "allreduce_sum": float(hvd.allreduce(tf.constant(float(rank)), op=hvd.Sum)),
        "allreduce_avg": float(hvd.allreduce(tf.constant(float(rank)))),
        "grouped": [float(t) for t in hvd.grouped_allreduce(
            [tf.constant(1.0), tf.constant(float(rank))], op=hvd.Sum)],
        "allgather_rows": hvd.allgather(mine)[:, 0].numpy().tolist(),
        "grouped_allgather": [t.shape[0] for t in hvd.grouped_allgather([mine, mine])],
        "broadcast": float(hvd.broadcast(tf.constant(float(rank + 5)), root_rank=size - 1)),
        "broadcast_object": hvd.broadcast_object({"from": rank}, root_rank=0),
        "allgather_object": hvd.allgather_object(f"r{rank}"),
        "reducescatter": hvd.reducescatter(tf.ones([2 * size, 1]) * (rank + 1),
                                           op=hvd.Sum).numpy().ravel().tolist(),
        # rank r sends d+1 rows of value 10r+d to rank d
        "alltoall": [x.numpy().ravel().tolist() for x in hvd.alltoall(
            tf.constant([10.0 * rank + d for d in range(size) for _ in range(d + 1)]),
            splits=[d + 1 for d in range(size)])],
    }
    slices = tf.IndexedSlices(tf.ones([1, 2]) * (rank + 1), tf.constant([rank]), tf.constant([4, 2]))
    out["sparse_dense"] = tf.convert_to_tensor(hvd.allreduce(slices)).numpy().tolist()
    # Model parallelism: a local layer whose shape differs by rank keeps its gradient,
    # scaled by 1/size (Horovod's rule); only the shared layer is reduced and guarded.
    local = tf.Variable(tf.ones([rank + 2, 3]))
    shared = tf.Variable(tf.ones([3]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(local * shared) * (rank + 1)
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    g_local, g_shared = tape.gradient(loss, [local, shared])
    out["local_grad"] = g_local.numpy()[0].tolist()
    out["shared_grad"] = g_shared.numpy().tolist()
    if hvd.gloo_built() or hvd.mpi_built():  # Horovod checks shapes; MWMS's collectives do not
        try:
            hvd.allreduce(tf.zeros([2, 3] if rank == 0 else [3, 2]))
            out["shape_mismatch"] = "reduced"
        except tf.errors.OpError as err:
            out["shape_mismatch"] = type(err).__name__
    try:
        out["join"] = int(hvd.join())
    except Exception as err:  # MWMS cannot join: its one line
        out["join"] = f"{type(err).__name__}: {err}"
    hvd.barrier()
    return out


def main():
    args = parse_args()
    hvd.init()
    (x, y), (x_test, y_test) = load_data(hvd.rank(), hvd.size())
    keras.utils.set_random_seed(100 + hvd.rank())  # different initial weights per rank
    model = build_model()
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    opt = keras.optimizers.Adam(args.lr * hvd.size())

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape, divergence_check_steps=args.check_every)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch and not args.no_broadcast:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    steps = args.epochs * ((1400 // hvd.size()) // args.batch_size)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=hvd.rank())
    batches = iter(dataset.repeat().batch(args.batch_size))
    for step in range(steps):
        images, labels = next(batches)
        loss = training_step(images, labels, step == 0)
        if step % 10 == 0 and hvd.rank() == 0:
            print(f"Step #{step}\tLoss: {float(loss):.6f}", flush=True)
    if hvd.rank() == 0:  # one writer
        model.save_weights("./checkpoint.weights.h5")
    accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), 1) == y_test))
    result = {"rank": hvd.rank(), "size": hvd.size(), "digest": weights_digest(model),
              "accuracy": accuracy, "steps": steps, "optimizer_steps": int(opt.iterations),
              "collectives": collectives()}
    # Drift: the last rank nudges one weight on its own; a checked step must stop every rank.
    if hvd.rank() == hvd.size() - 1:
        model.trainable_variables[0].assign_add(tf.fill(model.trainable_variables[0].shape, 1e-3))
    result["drift_error"] = None
    for _ in range(args.check_every + 1):
        try:
            images, labels = next(batches)
            training_step(images, labels, False)
        except tf.errors.InvalidArgumentError as err:
            result["drift_error"] = next(line for line in str(err).splitlines()
                                         if "ranks diverged" in line)
            break
    with open(args.result.format(rank=hvd.rank()), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
