"""One rank of tests/multiprocess/test_hvd_api_ranks.py: Horovod's Keras API as a
Horovod script calls it (`import horovod_train.keras as hvd`), every answer written
to <out_dir>/rank<N>.json for the test to check against exact expected values.

argv: out_dir modes, where modes is a comma-separated list of, run in order in one job:
  api      - the process facts and every tensor collective, eagerly and in a tf.function;
             KerasState sync/restore/commit; load_model of the chief's checkpoint
  perturb  - model.fit with the broadcast callback; rank 1 alters a kernel after
             epoch 1: the train-end check must stop every rank (RanksDiverged)
  instep   - the same without callbacks; the optimizer's own check every 4 updates
  elastic  - instep inside hvd.elastic.run: the caller raises the typed RanksDiverged
             from the optimizer's verdict tensor
(each writes "fit_<mode>"; every rank stops at the same check, so the ranks are still
in step for the next mode.)

It runs at module level: as a script, or as the hvd_api job of a rank session
(rank_session.py runs it with runpy), in each launcher's session of conftest.py.
"""
import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf

import horovod_train.keras as hvd
import keras

OUT, MODES = sys.argv[1], sys.argv[2]
hvd.init()
R, N = hvd.rank(), hvd.size()
result = {"rank": R, "size": N, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
          "cross": [hvd.cross_rank(), hvd.cross_size()],
          "facts": {"mpi": hvd.mpi_enabled(), "gloo": hvd.gloo_enabled(),
                    "nccl": hvd.nccl_built()}}


def save():
    with open(os.path.join(OUT, f"rank{R}.json"), "w") as f:
        json.dump(result, f)


def values(t):
    return np.asarray(t).tolist()


def collectives():
    mine = tf.constant([R + 1.0, 2.0 * (R + 1)])
    out = {"average": values(hvd.allreduce(mine)),
           "sum": values(hvd.allreduce(mine, op=hvd.Sum)),
           "average_false": values(hvd.allreduce(mine, average=False)),
           "min": values(hvd.allreduce(mine, op=hvd.Min)),
           "max": values(hvd.allreduce(mine, op=hvd.Max)),
           "scaled": values(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0,
                                          postscale_factor=0.5)),
           "fp16": values(hvd.allreduce(mine, compression=hvd.Compression.fp16)),
           "grouped": [values(t) for t in hvd.grouped_allreduce(
               [mine, tf.fill([2, 2], float(R))], op=hvd.Sum)],
           "allgather": values(hvd.allgather(tf.fill([R + 1, 2], float(R)))),
           "broadcast": values(hvd.broadcast(tf.constant([10 * R, 7]), root_rank=N - 1)),
           "reducescatter": values(hvd.reducescatter(
               tf.reshape(tf.range(2 * N, dtype=tf.float32), [2 * N, 1]) * (R + 1), op=hvd.Sum)),
           # 2N + 1 rows: the lower ranks take one more (Gloo: our alltoall and sum).
           "reducescatter_uneven": values(hvd.reducescatter(
               tf.reshape(tf.range(2 * N + 1, dtype=tf.float32), [2 * N + 1, 1]) * (R + 1))),
           "object": hvd.broadcast_object({"from": R}, root_rank=0),
           "objects": hvd.allgather_object(f"r{R}")}

    @tf.function
    def in_graph(x):
        return hvd.allreduce(x, op=hvd.Sum), hvd.allgather(tf.reshape(x, [1, 2]))
    total, gathered = in_graph(mine)
    out["graph_sum"], out["graph_allgather"] = values(total), values(gathered)
    v = tf.Variable([float(R), float(R)])
    hvd.broadcast_variables([v], root_rank=N - 1)
    out["broadcast_variables"] = values(v.numpy())
    return out


def digest(model):
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def build(seed):
    keras.utils.set_random_seed(seed)  # a different start on every rank
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(1)])


def elastic_state():
    model = build(R)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    state = hvd.elastic.KerasState(model, batch=20 + R, epoch=10 + R)
    state.sync()
    synced = digest(model)
    out = {"synced": synced, "batch": state.batch, "epoch": state.epoch}
    model.set_weights([w + 1.0 for w in model.get_weights()])
    state.batch = 99
    state.restore()
    out["restored_equal"] = digest(model) == synced and state.batch == 20
    model.set_weights([w * 2.0 for w in model.get_weights()])
    state.batch = 21
    state.commit()
    state.restore()
    out["committed_kept"] = digest(model) != synced and state.batch == 21
    return out


def load_model():
    model = build(R)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")  # a plain optimizer
    x = np.ones((8, 4), "float32")
    model.fit(x, x[:, :1], epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    path = os.path.join(OUT, "shared.keras")
    if R == 0:
        model.save(path)
    hvd.allreduce(tf.constant(0.0))  # the file exists before anyone reads it
    loaded = hvd.load_model(path)
    return {"wrapped": type(loaded.optimizer).__name__,
            "inner": type(loaded.optimizer.inner_optimizer).__name__,
            "same_weights": digest(loaded) == digest(model)}


def fit_with_perturbation(mode):
    callbacks_on = mode == "perturb"
    x = np.random.RandomState(R).rand(64, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = build(R)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
                                   divergence_check_steps=0 if callbacks_on else 4)
    model.compile(optimizer=opt, loss="mse")

    class Perturb(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0 and R == 1:
                self.model.layers[0].kernel.assign_add(tf.fill([4, 8], 1e-3))

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if callbacks_on else []

    def fit(*_):
        model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=callbacks + [Perturb()])
    if mode == "elastic":
        fit = hvd.elastic.run(fit)
    try:  # the perturbation runs after the broadcast callback's epoch-1 check
        fit(hvd.elastic.KerasState(model) if mode == "elastic" else None)
    except Exception as err:  # every rank must stop here, with the guard's message
        return {"stopped": True, "error": str(err).splitlines()[0][:2000],
                "message": "ranks diverged: rank 1" in str(err), "type": type(err).__name__,
                "verdict": [getattr(err, "ranks", None), getattr(err, "step", None)],
                "updates": int(opt.iterations.numpy())}
    return {"stopped": False, "updates": int(opt.iterations.numpy())}


def api():
    result["collectives"] = collectives()
    result["elastic"] = elastic_state()
    result["load_model"] = load_model()
    try:
        hvd.start_timeline(os.path.join(OUT, f"timeline{R}.json"))
        hvd.stop_timeline()
        result["timeline"] = "ok"
    except ValueError as err:
        result["timeline"] = str(err)


for mode in MODES.split(","):
    if mode == "api":
        api()
    else:
        result[f"fit_{mode}"] = fit_with_perturbation(mode)
save()
