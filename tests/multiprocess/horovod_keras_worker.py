"""One rank of test_keras_fit.py::test_horovod_keras_layer_still_diverges_under_keras3
(the Gloo rank session's horovod_keras job, conftest.py): Horovod's own Keras layer
(horovod.tensorflow.keras) under Keras 3; rank 0 writes every rank's weight digest and
what the broadcast callback did to argv[1]."""
import hashlib, json, sys
import numpy as np
import keras
import horovod.tensorflow as hvd_core
import horovod.tensorflow.keras as hvd

hvd.init()
keras.utils.set_random_seed(0)  # the same initial weights on both ranks
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
rng = np.random.default_rng(hvd.rank())  # each rank its own shard
x, y = rng.normal(size=(64, 8)).astype("float32"), rng.normal(size=(64, 4)).astype("float32")
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
try:
    model.fit(x, y, batch_size=16, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    broadcast = "ok"
except Exception as err:
    broadcast = f"{type(err).__name__}: {err}"
digests = hvd_core.allgather_object(digest)
if hvd.rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"digests": digests, "broadcast": broadcast}, f)
