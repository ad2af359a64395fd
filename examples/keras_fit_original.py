"""A plain Keras 3 script: a small CNN on scikit-learn's handwritten digits, one process.

examples/keras_fit.py is this script with the lines marked `# horovod_train:` changed, so
that it trains data-parallel under horovodrun, mpirun, srun or as MWMS workers:

    diff examples/keras_fit_original.py examples/keras_fit.py
"""
import argparse
import hashlib
import json

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

JIT_COMPILE = {"auto": "auto", "true": True, "false": False}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Keras 3 fit on scikit-learn's digits")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=0.002)
    parser.add_argument("--precision", choices=["float32", "mixed_float16"], default="float32")
    parser.add_argument("--intra_op", type=int, default=0, help="intra-op threads; 0 = default")
    parser.add_argument("--checkpoint", help="save the model here after every epoch (.keras)")
    parser.add_argument("--summary_json", help="write test accuracy and a weight digest here")
    parser.add_argument("--jit_compile", choices=["auto", "true", "false"], default="auto",
                        help="XLA for the train step; auto (Keras's default) = on with a GPU")
    return parser.parse_args(argv)


def load_data():
    """8x8 grey digits, 1437 train / 360 test, the same split every run."""
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=360, random_state=0, stratify=y)
    return (x_train, y_train), (x_test, y_test)


def build_model():
    inputs = keras.Input(shape=(8, 8, 1))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    outputs = keras.layers.Dense(10, dtype="float32")(x)  # float32 logits under mixed precision
    return keras.Model(inputs, outputs)


def digest(model) -> str:
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def main(args):
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op)
    keras.mixed_precision.set_global_policy(args.precision)
    keras.utils.set_random_seed(42)
    (x_train, y_train), (x_test, y_test) = load_data()

    model = build_model()
    optimizer = keras.optimizers.Adam(args.learning_rate)
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=JIT_COMPILE[args.jit_compile])
    callbacks = [keras.callbacks.ModelCheckpoint(args.checkpoint)] if args.checkpoint else []

    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(x_test, y_test), callbacks=callbacks, verbose=2)
    test_loss, test_accuracy = model.evaluate(x_test, y_test, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=-1)
    print(f"test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}")

    digests = [digest(model)]
    if args.summary_json:
        summary = {"world_size": 1,
                   "test_accuracy": test_accuracy, "test_loss": test_loss,
                   "predict_accuracy": float(np.mean(predicted == y_test)),
                   "jit_compile": bool(model.jit_compile),
                   "history": history.history, "weight_digests": digests}
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main(parse_args())
