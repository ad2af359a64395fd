"""The start-up baseline: plain Keras 3 `model.fit` in one process, as a user without us
would write it, on the same model and data as bench/startup.py's horovod_train run.

  python bench/startup_keras.py --dataset digits
  python bench/startup_keras.py --dataset tfrecord --data_dir D

digits: scikit-learn's arrays, scaled as horovod_train scales them, fit from numpy.
tfrecord: the converted directory's training files (listed in its dataset.json) through
tf.data: parse, decode the JPEG, scale to [0, 1], shuffle, batch, prefetch.
The model is the zoo's, compiled with Adam and the project's default learning rate.
Prints one JSON line: seconds from the process's start to the end of the first
training batch (the same clock as horovod_train's startup_s total).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _process_age() -> float:
    import psutil
    return time.time() - psutil.Process().create_time()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=("digits", "tfrecord"), required=True)
    p.add_argument("--data_dir")
    p.add_argument("--model", default="digits_cnn")
    p.add_argument("--batch_size", type=int, default=32)
    return p.parse_args(argv)


def _digits():
    import numpy as np
    from sklearn.datasets import load_digits
    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[..., None]
    return (x, bunch.target.astype(np.int32)), x.shape[1:], 10


def _tfrecord(data_dir: str, batch_size: int):
    import tensorflow as tf
    with open(os.path.join(data_dir, "dataset.json")) as f:
        meta = json.load(f)
    shape, classes = tuple(meta["shape"]), meta["num_classes"]
    files = [os.path.join(data_dir, name) for name in meta["splits"]["train"]["files"]]
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([1], tf.int64)}

    def decode(record):
        example = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_image(example["image"], channels=shape[-1], expand_animations=False)
        image = tf.cast(tf.reshape(image, shape), tf.float32) / 255.0
        return image, tf.cast(example["label"][0], tf.int32)
    ds = tf.data.TFRecordDataset(files).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.shuffle(1000).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return (ds,), shape, classes


def main(argv=None):
    args = parse(argv)
    import keras
    import models
    ends = {"imports": _process_age()}  # phase -> its end, as horovod_train's startup.py
    keras.utils.set_random_seed(0)
    inputs, shape, classes = (_digits() if args.dataset == "digits"
                              else _tfrecord(args.data_dir, args.batch_size))
    ends["data"] = _process_age()
    model = models.get_model(args.model, input_shape=shape, num_classes=classes)
    model.compile(optimizer=keras.optimizers.Adam(0.002),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    ends["model"] = _process_age()
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: ends.setdefault("first_step", _process_age()))
    fit = {"batch_size": args.batch_size} if args.dataset == "digits" else {}
    model.fit(*inputs, epochs=1, steps_per_epoch=1, verbose=0, callbacks=[clock], **fit)
    phases, before = {}, 0.0
    for key, end in ends.items():
        phases[key], before = round(end - before, 3), end
    print(json.dumps({"first_step_after_s": ends["first_step"], "phases": phases}), flush=True)


if __name__ == "__main__":
    main()
