"""One rank of test_keras_fit.py::test_accumulation_over_ranks_equals_one_large_batch
(the Gloo rank session's keras_accumulation job, conftest.py): every way to ask for 2
accumulated micro-batches on 2 ranks, against one process with batches of 24; the chief
writes the gaps, digests and update counts to argv[1].

htk.Strategy(intra_op_threads=1): in a rank session TensorFlow's pools were made by an
earlier job, with the one thread of the session's TF_NUM_INTRAOP_THREADS=1; TF accepts
the same count again, so the request holds as in a launch of its own.
"""
import json, sys
import numpy as np
import keras
import horovod_train.keras as htk

strategy = htk.Strategy(intra_op_threads=1)
rng = np.random.default_rng(0)
x = rng.random((96, 6), dtype=np.float32)
y = (x.sum(axis=1) > 3).astype(np.int32)

def model():
    keras.utils.set_random_seed(strategy.rank)  # different starts: the broadcast must fix them
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(2)])

loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
# 2 ranks x 2 micro-batches of 6: each update averages rows [24 s, 24 s + 24) of x. Three
# ways to ask for it, one kernel: ours (the mean), ours under the XLA split, and Horovod's
# backward_passes_per_step (the sum, so half the rate).
VARIANTS = {"accum": (lambda: strategy.distributed_optimizer(keras.optimizers.SGD(0.2),
                                                             accum_steps=2), False),
            "accum_xla": (lambda: strategy.distributed_optimizer(keras.optimizers.SGD(0.2),
                                                                 accum_steps=2), True),
            "passes_sum": (lambda: htk.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                            backward_passes_per_step=2), False),
            # The optimizer's state sharded over the ranks (none for plain SGD: the
            # reduce-scatter and allgather alone), and Adam's two moments, against Adam
            # unsharded on the ranks.
            "accum_sharded": (lambda: strategy.distributed_optimizer(
                keras.optimizers.SGD(0.2), accum_steps=2, shard_optimizer_state=True), False),
            "adam": (lambda: strategy.distributed_optimizer(
                keras.optimizers.Adam(0.01, name="adam"), accum_steps=2), False),
            "adam_sharded": (lambda: strategy.distributed_optimizer(
                keras.optimizers.Adam(0.01, name="adam"), accum_steps=2,
                shard_optimizer_state=True), False),
            # SGD with momentum without accumulation, sharded against unsharded.
            "momentum": (lambda: strategy.distributed_optimizer(
                keras.optimizers.SGD(0.05, momentum=0.9, name="sgdm")), False),
            "momentum_sharded": (lambda: strategy.distributed_optimizer(
                keras.optimizers.SGD(0.05, momentum=0.9, name="sgdm"),
                shard_optimizer_state=True), False)}
dists = {}
for name, (make_opt, jit) in VARIANTS.items():
    with strategy.scope():
        dist = model()
        dist.compile(make_opt(), loss, jit_compile=jit)
    dist.fit(*strategy.shard((x, y)), batch_size=6, epochs=2, shuffle=False, verbose=0,
             callbacks=strategy.callbacks())
    dists[name] = (dist, strategy.weight_digests(dist))

# mixed_float16 without XLA (the example runs of test_keras_fit use fp16 under XLA only):
# rank 1 alone finds its gradients inf at the 3rd update; both ranks skip it and halve
# the scale, and stay identical.
keras.utils.set_random_seed(strategy.rank)
with strategy.scope():
    fp16 = keras.Sequential([keras.Input((6,)),
                             keras.layers.Dense(8, activation="relu", dtype="mixed_float16"),
                             keras.layers.Dense(2, dtype="float32")])
    fp16_opt = strategy.distributed_optimizer(keras.optimizers.SGD(0.2), loss_scale=True,
                                              inject_nonfinite=(3, 1))
    fp16.compile(fp16_opt, loss, jit_compile=False)
fp16.fit(*strategy.shard((x, y)), batch_size=6, epochs=2, shuffle=False, verbose=0,
         callbacks=strategy.callbacks())
fp16_skips = strategy.gather([fp16_opt.skipped_steps, fp16_opt.dynamic_scale.numpy()])
fp16_run = {"digests": strategy.weight_digests(fp16), "skipped": fp16_skips[:, 0].tolist(),
            "scale": fp16_skips[:, 1].tolist(), "updates": int(fp16_opt.iterations.numpy()),
            "compute_dtype": fp16.layers[0].compute_dtype}

if strategy.is_chief:  # the same updates in one process: batches of 24, plain SGD
    keras.utils.set_random_seed(0)
    ref = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                            keras.layers.Dense(2)])
    ref.compile(keras.optimizers.SGD(0.2), loss)
    ref.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    start = model().get_weights()
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(ref.get_weights(), start))
    out = {"moved": moved}
    for name, (dist, digests) in dists.items():
        gap = max(float(np.max(np.abs(a - b)))
                  for a, b in zip(dist.get_weights(), ref.get_weights()))
        base = name.split("_")[0]
        if base in ("adam", "momentum"):  # against the ranks' unsharded run of it
            gap = max(float(np.max(np.abs(a - b)))
                      for a, b in zip(dist.get_weights(), dists[base][0].get_weights()))
        out[name] = {"digests": digests, "gap": gap,
                     "updates": int(dist.optimizer.iterations.numpy()),
                     "split": type(dist.train_step).__name__}
    out["fp16_skip"] = fp16_run
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
