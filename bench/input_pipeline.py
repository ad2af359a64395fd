"""Input-pipeline headroom benchmark (a script, not a timed test).

    python bench/input_pipeline.py [--batch_size=32] [--consumer_rate=400] [--skip_resnet]

For each case it prints
  pipeline ex/s   examples/s the input pipeline delivers alone (nothing consumes them),
  consumer ex/s   examples/s the training step consumes when fed from memory,
  headroom        pipeline / consumer (target >= 3x),
  data wait       share of step time spent waiting in next() when the pipeline
                  feeds the consumer for real (target < 5%): over the whole run, which
                  includes starting a new pipeline at every epoch (about 0.1 s of
                  tf.data set-up: a lot next to digits' 0.3 s epochs, nothing next to
                  a real dataset's), and within epochs only.
Cases: the default model (digits_cnn) on the bundled digits in memory and converted
to TFRecord; a ResNet-sized pipeline (224x224x3 JPEG TFRecord, decoded to float32)
feeding ResNet-50 on this machine's CPU, and feeding a simulated accelerator that
consumes --consumer_rate images/s (it sleeps, leaving the CPU to the pipeline, as a
GPU would). Everything runs in one process on the cores it is given.
"""
import argparse
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

WARMUP_BATCHES = 3  # tracing and the first file opens are not throughput


def _tf():
    import tensorflow as tf
    return tf


def pipeline_rate(dataset_fn, batch_size: int, batches: int) -> float:
    """Examples/s of the pipeline alone, re-creating it per epoch as the loop does."""
    done, epoch, start = -WARMUP_BATCHES, 0, None
    while done < batches:
        for _ in dataset_fn(epoch):
            done += 1
            if done == 0:
                start = time.perf_counter()
            if done >= batches:
                break
        epoch += 1
    return batches * batch_size / (time.perf_counter() - start)


def _train_step(model_name: str, input_shape, num_classes: int):
    import keras
    import tensorflow as tf
    import models
    from horovod_train.backends.local import LocalBackend
    from horovod_train.step import TrainStep
    backend = LocalBackend()
    backend.setup()
    model = models.get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, backend)
    no_fault = tf.constant(False)
    return lambda x, y: float(step.fused(x, y, no_fault)[0])  # (loss, finite)


def consumer_rate(step, batches_in_memory, batch_size: int, steps: int) -> float:
    """Examples/s the train step consumes from batches already in memory."""
    for x, y in batches_in_memory[:2]:
        step(x, y)  # tracing
    start = time.perf_counter()
    for i in range(steps):
        x, y = batches_in_memory[i % len(batches_in_memory)]
        step(x, y)
    return steps * batch_size / (time.perf_counter() - start)


def fed_wait_share(step, dataset_fn, steps: int) -> tuple[float, float]:
    """Shares of step time spent waiting for data when the pipeline feeds `step`:
    (over the run, including each epoch's pipeline start; within epochs only)."""
    wait = total = first_wait = first_total = 0.0
    it, epoch, done, in_epoch = iter(dataset_fn(0)), 0, -WARMUP_BATCHES, 0
    while done < steps:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            epoch, in_epoch = epoch + 1, 0
            it = iter(dataset_fn(epoch))  # as the loop does: a new pipeline per epoch
            x, y = next(it)
        t1 = time.perf_counter()
        step(x, y)
        t2 = time.perf_counter()
        done, in_epoch = done + 1, in_epoch + 1
        if done > 0:
            wait, total = wait + t1 - t0, total + t2 - t0
            if in_epoch == 1:
                first_wait, first_total = first_wait + t1 - t0, first_total + t2 - t0
    return wait / total, (wait - first_wait) / max(total - first_total, 1e-9)


def report(label: str, produce: float, consume: float, waits: tuple) -> None:
    print(f"{label:<50} {produce:>9.0f} {consume:>9.1f} {produce / consume:>8.1f}x "
          f"{100 * waits[0]:>8.1f}% {100 * waits[1]:>8.1f}%", flush=True)


def _shard():
    from horovod_train.data.sharding import ShardInfo
    return ShardInfo(0, 1)


def digits_cases(tmp: str, args) -> None:
    from horovod_train import config as cfg
    from horovod_train import data
    from horovod_train.data import convert, sources
    digits = sources.load_digits(None)
    npz = os.path.join(tmp, "digits.npz")
    np.savez(npz, x_train=digits.x_train, y_train=digits.y_train, x_test=digits.x_test,
             y_test=digits.y_test)
    convert.convert(convert.ConvertOptions(npz, os.path.join(tmp, "digits"), num_shards=4,
                                           progress=False))
    tfrecord = data.load(cfg.DataConfig(dataset="tfrecord", data_dir=os.path.join(tmp, "digits")))
    step = _train_step("digits_cnn", (8, 8, 1), 10)
    b = args.batch_size
    in_memory = list(digits.train_dataset(_shard(), b, 0, 0))
    consume = consumer_rate(step, in_memory, b, args.steps)
    for label, source in (("digits in memory -> digits_cnn", digits),
                          ("digits TFRecord (4 files) -> digits_cnn", tfrecord)):
        fn = (lambda s: lambda epoch: s.train_dataset(_shard(), b, 0, epoch, args.threads))(source)
        report(label, pipeline_rate(fn, b, args.steps), consume, fed_wait_share(step, fn, args.steps))


def _jpeg_folders(tmp: str, count: int) -> str:
    """224x224 RGB JPEGs in class folders: smooth shapes plus noise, about the size of
    real photos at this resolution (not the flat colours that compress to nothing)."""
    from PIL import Image
    rng = np.random.default_rng(0)
    root = os.path.join(tmp, "jpegs")
    for i in range(count):
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        small = Image.fromarray(rng.integers(0, 256, (14, 14, 3), dtype=np.uint8))
        pixels = np.asarray(small.resize((224, 224), Image.BILINEAR), np.int16)
        pixels = np.clip(pixels + rng.integers(-12, 13, pixels.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        with open(os.path.join(folder, f"{i}.jpg"), "wb") as f:
            f.write(buf.getvalue())
    return root


def resnet_cases(tmp: str, args) -> None:
    from horovod_train import config as cfg
    from horovod_train import data
    from horovod_train.data import convert
    root = _jpeg_folders(tmp, args.images)
    out = os.path.join(tmp, "imagenet_like")
    convert.convert(convert.ConvertOptions(root, out, num_shards=8, eval_fraction=0.0,
                                           progress=False))
    source = data.load(cfg.DataConfig(dataset="tfrecord", data_dir=out, verify_data=False))
    b = args.batch_size
    fn = lambda epoch: source.train_dataset(_shard(), b, 0, epoch, args.threads)  # noqa: E731
    produce = pipeline_rate(fn, b, args.steps)
    sleep = lambda x, y: time.sleep(b / args.consumer_rate)  # noqa: E731
    report(f"224x224x3 JPEG TFRecord -> {args.consumer_rate:.0f} img/s accelerator*", produce, args.consumer_rate, fed_wait_share(sleep, fn, args.steps))
    if not args.skip_resnet:
        step = _train_step(args.resnet, (224, 224, 3), 1000)
        small = args.resnet_batch
        fn_small = lambda epoch: source.train_dataset(_shard(), small, 0, epoch)  # noqa: E731
        batches = [next(iter(fn_small(0)))]
        consume = consumer_rate(step, batches, small, args.resnet_steps)
        report(f"224x224x3 JPEG TFRecord -> {args.resnet} on this CPU",
               pipeline_rate(fn_small, small, args.steps), consume,
               fed_wait_share(step, fn_small, args.resnet_steps))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=150, help="batches timed per measurement")
    parser.add_argument("--threads", type=int, default=0, help="--data_threads (0 = autotune)")
    parser.add_argument("--images", type=int, default=2048, help="JPEGs in the ResNet-sized set")
    parser.add_argument("--consumer_rate", type=float, default=400.0,
                        help="images/s of the simulated accelerator (an assumed figure for "
                             "ResNet-50 training on one GPU; pass your own)")
    parser.add_argument("--resnet", default="resnet50")
    parser.add_argument("--resnet_batch", type=int, default=8)
    parser.add_argument("--resnet_steps", type=int, default=3)
    parser.add_argument("--skip_resnet", action="store_true")
    args = parser.parse_args(argv)
    tf = _tf()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, batch {args.batch_size}, "
          f"data_threads {args.threads or 'autotune'}")
    print(f"{'case':<50} {'pipeline':>9} {'consumer':>9} {'headroom':>9} "
          f"{'data wait':>9} {'(in epoch)':>9}")
    print(f"{'':<50} {'ex/s':>9} {'ex/s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        digits_cases(tmp, args)
        resnet_cases(tmp, args)
    print(f"* simulated: sleeps batch/{args.consumer_rate:.0f} s per step, leaving the CPUs to the "
          "pipeline as a GPU would; --consumer_rate sets the rate.")


if __name__ == "__main__":
    main()
