"""M6 / issue 4: input-pipeline headroom, measured through the loop's own iterator.

    python bench/input_pipeline.py [--short] [--profile] [--out runs/bench/m6_input.json]
    python bench/input_pipeline.py --ab 3   # digits TFRecord: streamed vs cached, alternating
    python bench/input_pipeline.py --ab 5 --ab_what fetch   # the step's fetch op, before/after

The training loop reads its epochs through pipeline.epoch_batches (in-memory sets from
one lazily built iterator, record sets a bounded group of epochs per iterator, the next
built ahead); this script builds its batches with that very function and walks its
epochs as the loop does (LoopReader), so set-up costs are paid as training pays them.
Per case:
  pipeline ex/s   examples/s of that iterator alone (nothing consumes them);
  consumer ex/s   examples/s the train step consumes from batches already in memory;
  headroom        pipeline / consumer (target >= 5x, issue 23; was 3x);
  data wait       share of wall time the step waits for its batch when the iterator
                  feeds it for real, fetched inside the compiled step as the loop
                  fetches it (horovod_train/feed.py) (target < 2%, issue 23; was 5%);
  floor           the same wait for an iterator that costs nothing (one batch in memory,
                  repeated), measured right after: the fetch's own cost at this load,
                  which no pipeline can go below.
Cases: the default model (digits_cnn) on the bundled digits, in memory and as
TFRecord; a ResNet-sized pipeline (224x224x3 JPEG TFRecord, decoded to float32)
feeding (a) a simulated accelerator that consumes --consumer_rate img/s and sleeps,
leaving the CPUs to the pipeline as a GPU would, and (b) ResNet-50 on this CPU.
--profile adds the tf.data settings sweep for the JPEG pipeline.
"""
import argparse
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

WARMUP_BATCHES = 3  # tracing and the first file opens are not throughput
TARGET_HEADROOM, TARGET_WAIT = 5.0, 0.02


class _OneRank:
    """The slice of a backend that pipeline.epoch_batches uses, with optional extra
    tf.data options laid over the pipeline's own (for the profile sweep)."""

    def __init__(self, options=None):
        self.options = options

    def distribute_dataset(self, dataset_fn):
        from horovod_train.data.sharding import ShardInfo
        ds = dataset_fn(ShardInfo(0, 1))
        return ds.with_options(self.options) if self.options is not None else ds


class LoopReader:
    """An EpochStream read as the training loop reads it: each batch from the current
    iterator, advance() after each epoch's last batch. next() fetches eagerly;
    fetch_from() is the iterator a compiled step fetches the next batch from."""

    def __init__(self, stream, per_epoch: int):
        self.stream, self.per_epoch, self.taken = stream, per_epoch, 0

    def fetch_from(self):
        iterator = self.stream.current
        self.taken += 1
        if self.taken % self.per_epoch == 0:
            self.stream.advance()  # after this batch, as Trainer._train_one does
        return iterator

    def __iter__(self):
        return self

    def __next__(self):
        iterator = self.fetch_from()
        if iterator is None:  # past the last epoch: the stream has nothing current
            raise StopIteration
        return next(iterator)


class Repeated:
    """fetch_from() for a plain iterator (the floor's batch in memory, repeated)."""

    def __init__(self, iterator):
        self.iterator = iterator

    def fetch_from(self):
        return self.iterator


def loop_batches(source, batch_size: int, threads: int, batches: int, options=None):
    """The training loop's batches of enough epochs of `source` for `batches` batches
    (epoch boundaries included), built by the function the loop uses, as a LoopReader."""
    from horovod_train.data import pipeline, sharding
    per_epoch = sharding.steps_per_epoch(source.num_train_examples, batch_size, 1)
    stream = pipeline.epoch_batches(source, _OneRank(options), batch_size=batch_size, seed=0,
                                    threads=threads, per_epoch=per_epoch,
                                    epochs=1 + (batches + WARMUP_BATCHES) // per_epoch)
    return LoopReader(stream, per_epoch)


def pipeline_rate(make_iter, batch_size: int, batches: int) -> float:
    it = make_iter()
    for _ in range(WARMUP_BATCHES):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch_size / (time.perf_counter() - start)


def consumer_rate(step, batches_in_memory, batch_size: int, steps: int) -> float:
    for x, y in batches_in_memory[:2]:
        step(x, y)  # tracing
    start = time.perf_counter()
    for i in range(steps):
        step(*batches_in_memory[i % len(batches_in_memory)])
    return steps * batch_size / (time.perf_counter() - start)


def fed_steps(fed, make_iter, steps: int) -> tuple:
    """(share of wall time spent waiting for batches, seconds per step, CPU seconds per
    step of this process) while the loop's batches feed a consumer; fed(reader) runs one
    step and returns the seconds it waited."""
    it = make_iter()
    for _ in range(WARMUP_BATCHES):
        fed(it)
    wait = 0.0
    start, cpu = time.perf_counter(), common.cpu_seconds()
    for _ in range(steps):
        wait += fed(it)
    elapsed = time.perf_counter() - start
    return wait / elapsed, elapsed / steps, (common.cpu_seconds() - cpu) / steps


def fed_wait_share(fed, make_iter, steps: int) -> float:
    return fed_steps(fed, make_iter, steps)[0]


def floor_wait(fed, batch, steps: int) -> float:
    """fed_wait_share of one batch repeated: what the fetch itself costs here and now."""
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensors(batch).repeat()
    return fed_wait_share(fed, lambda: Repeated(iter(ds)), steps)


def _load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def _train_step(model_name: str, input_shape, num_classes: int):
    """(step(x, y) on a batch in memory, fed(reader) as the loop runs it: one step on
    the batch fetched from reader.fetch_from(), returning the seconds it waited)."""
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
    train = TrainStep(model, optimizer, backend)
    no_fault = (tf.constant(False), tf.constant(0.0))  # no poison, no stop vote

    def fed(reader):
        (loss, _, _), waited = backend.run_step_fed(train.fused, reader.fetch_from(), *no_fault)
        float(loss)  # the step is done
        return float(waited)
    return (lambda x, y: float(train.fused(x, y, *no_fault)[0])), fed


def _accelerator(seconds_per_batch: float):
    """fed(reader) for a simulated accelerator: the batch is fetched in a compiled
    call (as the loop fetches it), then the step is a sleep that leaves the CPUs free."""
    import tensorflow as tf
    from horovod_train import feed
    fetch = tf.function(feed.fetch_timed)

    def fed(reader):
        _, waited = fetch(reader.fetch_from())
        waited = float(waited)
        time.sleep(seconds_per_batch)
        return waited
    return fed


def case(label, source, fed, consume, batch, args, steps=None) -> dict:
    need = max(args.steps, steps or 0) + WARMUP_BATCHES
    make = lambda: loop_batches(source, batch, args.threads, need)  # noqa: E731
    produce = pipeline_rate(make, batch, args.steps)
    wait = fed_wait_share(fed, make, steps or args.steps)
    floor = floor_wait(fed, next(make()), steps or args.steps)
    row = {"case": label, "pipeline": produce, "consumer": consume,
           "headroom": produce / consume, "data_wait": wait, "floor_wait": floor,
           "load": os.getloadavg()[0]}
    print(f"  {label}: pipeline {produce:.0f} ex/s, consumer {consume:.1f} ex/s, headroom "
          f"{produce / consume:.1f}x, data wait {100 * wait:.1f}% (floor {100 * floor:.1f}%), "
          f"{_load()}", flush=True)
    return row


def _digits(tmp: str, args):
    """(digits in memory, a loader of them as 4 TFRecord files, step, fed, batches)."""
    import numpy as np
    from horovod_train import config as cfg
    from horovod_train import data
    from horovod_train.data import convert, sources
    digits = sources.load_digits(None)
    npz = os.path.join(tmp, "digits.npz")
    np.savez(npz, x_train=digits.x_train, y_train=digits.y_train, x_test=digits.x_test,
             y_test=digits.y_test)
    convert.convert(convert.ConvertOptions(npz, os.path.join(tmp, "digits"), num_shards=4,
                                           progress=False))
    load = lambda: data.load(cfg.DataConfig(dataset="tfrecord",  # noqa: E731
                                            data_dir=os.path.join(tmp, "digits")))
    step, fed = _train_step("digits_cnn", (8, 8, 1), 10)
    return digits, load, step, fed, list(loop_batches(digits, args.batch_size, args.threads, 1))


def digits_cases(tmp: str, args) -> list:
    digits, load, step, fed, in_memory = _digits(tmp, args)
    b = args.batch_size
    consume = consumer_rate(step, in_memory, b, args.steps)
    return [case("digits in memory -> digits_cnn", digits, fed, consume, b, args),
            case("digits TFRecord (4 files) -> digits_cnn", load(), fed, consume, b, args)]


def ab_rounds(tmp: str, args) -> list:
    """Digits TFRecord -> digits_cnn with the shard streamed from its files every epoch
    (before issue 23: AUTO_CACHE_BYTES 0) and cached in memory (after), alternating, so
    both see the same load. A fresh source per run: the cache decision is memoised."""
    from horovod_train.data import pipeline
    digits, load, step, fed, in_memory = _digits(tmp, args)
    b, budget, rows = args.batch_size, pipeline.AUTO_CACHE_BYTES, []
    try:
        for r in range(args.ab):
            for label, bytes_ in (("before: streamed", 0), ("after: cached", budget)):
                pipeline.AUTO_CACHE_BYTES = bytes_
                consume = consumer_rate(step, in_memory, b, args.steps)
                rows.append(dict(case(f"{label} #{r + 1}", load(), fed, consume, b, args),
                                 variant=label))
    finally:
        pipeline.AUTO_CACHE_BYTES = budget
    return rows


def fetch_ab_rounds(tmp: str, args) -> list:
    """Digits TFRecord -> digits_cnn, the batch fetched by IteratorGetNext (its own
    thread, then back: before) and by IteratorGetNextSync on the step's thread (after,
    horovod_train/feed.py), alternating; each variant has its own compiled step, traced
    under its choice, on one model's copy so both do the same work."""
    from horovod_train import feed
    digits, load, _, _, _ = _digits(tmp, args)
    source, b, rows = load(), args.batch_size, []
    variants = {"before: IteratorGetNext": lambda: 1, "after: IteratorGetNextSync":
                feed.inter_op_threads}
    feds = {label: _train_step("digits_cnn", (8, 8, 1), 10)[1] for label in variants}
    real = feed.inter_op_threads
    try:
        for r in range(args.ab):
            order = list(variants.items())  # ABBA: neither side always runs first
            for label, threads in (order if r % 2 == 0 else order[::-1]):
                feed.inter_op_threads = threads  # read when the step is traced (round 1)
                make = lambda: loop_batches(source, b, args.threads, args.steps)  # noqa: E731
                wait, seconds, cpu = fed_steps(feds[label], make, args.steps)
                floor = floor_wait(feds[label], next(make()), args.steps)
                rows.append({"case": f"{label} #{r + 1}", "variant": label, "data_wait": wait,
                             "floor_wait": floor, "ms_per_step": 1e3 * seconds,
                             "cpu_ms_per_step": 1e3 * cpu, "load": os.getloadavg()[0]})
                print(f"  {label} #{r + 1}: data wait {100 * wait:.1f}% (floor "
                      f"{100 * floor:.1f}%), {1e3 * seconds:.2f} ms/step, {1e3 * cpu:.2f} CPU ms/step, "
                      f"{_load()}", flush=True)
    finally:
        feed.inter_op_threads = real
    return rows


# The columns of an A/B report: (key in a row, scale, format, header), where rows have it.
AB_COLUMNS = (("data_wait", 100, "{:.1f}%", "data wait"), ("floor_wait", 100, "{:.1f}%", "floor"),
              ("headroom", 1, "{:.1f}x", "headroom"), ("ms_per_step", 1, "{:.2f}", "ms/step"),
              ("cpu_ms_per_step", 1, "{:.2f}", "CPU ms/step"),
              ("load", 1, "{:.2f}", "load (1 min)"))


def ab_report(rows: list) -> str:
    import numpy as np
    columns = [c for c in AB_COLUMNS if c[0] in rows[0]]
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        cells = [variant, len(mine)]
        for key, scale, fmt, _ in columns:
            v = scale * np.array([r[key] for r in mine])
            cells.append(f"{fmt.format(np.median(v))} [{fmt.format(v.min())}, "
                         f"{fmt.format(v.max())}]")
        out.append(cells)
    return common.table(["digits TFRecord -> digits_cnn", "runs"] +
                        [f"{header} median [min, max]" for *_, header in columns], out)


def _jpeg_folders(tmp: str, count: int) -> str:
    """224x224 RGB JPEGs in class folders: smooth shapes plus noise, about the size of
    real photos at this resolution (not the flat colours that compress to nothing)."""
    import numpy as np
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


def jpeg_source(tmp: str, count: int):
    from horovod_train import config as cfg
    from horovod_train import data
    from horovod_train.data import convert
    out = os.path.join(tmp, "imagenet_like")
    convert.convert(convert.ConvertOptions(_jpeg_folders(tmp, count), out, num_shards=8,
                                           eval_fraction=0.0, progress=False))
    return data.load(cfg.DataConfig(dataset="tfrecord", data_dir=out, verify_data=False))


def resnet_cases(source, args) -> list:
    b = args.batch_size
    rows = [case(f"224x224x3 JPEG TFRecord -> {args.consumer_rate:.0f} img/s accelerator "
                 "(simulated)", source, _accelerator(b / args.consumer_rate),
                 args.consumer_rate, b, args)]
    if not args.skip_resnet:
        step, fed = _train_step(args.resnet, (224, 224, 3), 1000)
        small = args.resnet_batch
        batches = [next(loop_batches(source, small, args.threads, 1))]
        consume = consumer_rate(step, batches, small, args.resnet_steps)
        rows.append(case(f"224x224x3 JPEG TFRecord -> {args.resnet} on this CPU", source, fed,
                         consume, small, args, steps=args.resnet_steps))
    return rows


def profile(source, args) -> list:
    """JPEG pipeline alone under tf.data settings: where its time goes."""
    import tensorflow as tf

    def opts(**kw):
        o = tf.data.Options()
        for path, value in kw.items():
            obj = o
            *parents, leaf = path.split("__")
            for p in parents:
                obj = getattr(obj, p)
            setattr(obj, leaf, value)
        return o
    variants = [
        ("as shipped (autotune)", 0, None),
        ("data_threads=1", 1, None),
        ("data_threads=2", 2, None),
        ("data_threads=4", 4, None),
        ("max_intra_op_parallelism=1", 0, opts(threading__max_intra_op_parallelism=1)),
        ("deterministic=False", 0, opts(deterministic=False)),
    ]
    rows, b = [], args.batch_size
    for label, per_batch in (("records->decode f32->batch (before, no shuffle)", False),
                             ("records->decode u8->batch->f32 (as shipped, no shuffle)", True)):
        rate = pipeline_rate(lambda: iter(_decode_order(source, b, per_batch)), b, args.steps)
        rows.append({"variant": label, "pipeline": rate})
        print(f"  profile {label}: {rate:.0f} img/s", flush=True)
    for label, threads, options in variants:
        make = lambda: loop_batches(source, b, threads, args.steps, options)  # noqa: E731
        rate = pipeline_rate(make, b, args.steps)
        rows.append({"variant": label, "pipeline": rate})
        print(f"  profile {label}: {rate:.0f} img/s", flush=True)
    return rows


def _decode_order(source, batch_size: int, per_batch_standardize: bool):
    """The JPEG records decoded per example and batched; either standardized (uint8 ->
    float32 / 255) per example, as the pipeline did before, or per batch, as it does
    now: the batch copy then moves a quarter of the bytes and the cast runs once."""
    import tensorflow as tf
    from horovod_train.data import decode, pipeline, tfrecord
    parse = decode.parser(source.schema)
    u8 = decode.decoder(source.schema)
    # Every training file, read as the source reads them (interleaved, order kept).
    records = tf.data.TFRecordDataset(
        list(source.train.paths), buffer_size=tfrecord.READ_BUFFER,
        num_parallel_reads=min(len(source.train.paths), tfrecord.CYCLE_LENGTH)).repeat()
    if per_batch_standardize:
        ds = records.map(lambda r: u8(parse(r)), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size).map(decode.standardize, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = records.map(lambda r: decode.standardize(*u8(parse(r))),
                         num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size)
    return ds.with_options(pipeline.dataset_options(0)).prefetch(tf.data.AUTOTUNE)


AB_ROUNDS = {"cache": ab_rounds, "fetch": fetch_ab_rounds}


def measure_with(args) -> dict:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    result = {"tensorflow": tf.__version__, "batch_size": args.batch_size,
              "data_threads": args.threads, "intra_op_threads": args.intra_op_threads,
              "consumer_rate_assumed": args.consumer_rate, "ab": args.ab}
    with tempfile.TemporaryDirectory() as tmp:
        if args.ab:
            result["ab_what"] = args.ab_what
            result["cases"] = AB_ROUNDS[args.ab_what](tmp, args)
            return result
        result["cases"] = digits_cases(tmp, args)
        source = jpeg_source(tmp, args.images)
        result["cases"] += resnet_cases(source, args)
        if args.profile:
            result["profile"] = profile(source, args)
    return result


def meets_targets(case: dict) -> bool:
    return case["headroom"] >= TARGET_HEADROOM and case["data_wait"] < TARGET_WAIT


def report(r: dict) -> str:
    if r.get("ab"):
        return ab_report(r["cases"])
    rows = [[c["case"], f"{c['pipeline']:.0f}", f"{c['consumer']:.1f}", f"{c['headroom']:.1f}x",
             f"{100 * c['data_wait']:.1f}%", f"{100 * c['floor_wait']:.1f}%", f"{c['load']:.2f}",
             "met" if meets_targets(c) else "MISSED"]
            for c in r["cases"]]
    lines = [f"M6 input pipeline: batch {r['batch_size']}, data_threads "
             f"{r['data_threads'] or 'autotune'}, intra-op threads {r['intra_op_threads'] or 'all'}"
             f"; through the loop's one iterator",
             common.table(["case", "pipeline ex/s", "consumer ex/s", "headroom", "data wait",
                           "floor", "load", "targets"], rows),
             f"targets: headroom >= {TARGET_HEADROOM:g}x, data wait < {100 * TARGET_WAIT:g}%"]
    if r.get("profile"):
        lines += ["", "JPEG pipeline alone, tf.data settings:",
                  common.table(["variant", "img/s"], [[p["variant"], f"{p['pipeline']:.0f}"]
                                                      for p in r["profile"]])]
    return "\n".join(lines)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--short", action="store_true", help="the `make bench` version")
    p.add_argument("--out", default=os.path.join(common.OUT_DIR, "m6_input.json"))
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--steps", type=int, default=150, help="batches timed per measurement")
    p.add_argument("--threads", type=int, default=0, help="--data_threads (0 = autotune)")
    p.add_argument("--intra_op_threads", type=int, default=0, help="0 = all cores")
    p.add_argument("--images", type=int, default=2048, help="JPEGs in the ResNet-sized set")
    p.add_argument("--consumer_rate", type=float, default=400.0,
                   help="img/s of the simulated accelerator (an assumed figure for ResNet-50 "
                        "training on one GPU; pass your own)")
    p.add_argument("--resnet", default="resnet50")
    p.add_argument("--resnet_batch", type=int, default=8)
    p.add_argument("--resnet_steps", type=int, default=3)
    p.add_argument("--skip_resnet", action="store_true")
    p.add_argument("--profile", action="store_true", help="sweep tf.data settings (JPEG)")
    p.add_argument("--ab", type=int, default=0, metavar="ROUNDS",
                   help="only digits TFRecord: the --ab_what pair, alternating ROUNDS times")
    p.add_argument("--ab_what", choices=sorted(AB_ROUNDS), default="cache",
                   help="cache: the shard streamed vs cached; fetch: IteratorGetNext vs "
                        "IteratorGetNextSync in the step")
    args = p.parse_args(argv)
    if args.ab and args.out == p.get_default("out"):
        args.out = os.path.join(common.OUT_DIR, f"m6_ab_{args.ab_what}.json")  # keep the figure's file
    if args.short:
        args.steps, args.images, args.skip_resnet = 60, 512, True
    return args


def main(argv=None):
    args = parse(argv)
    common.run_figure("m6_input", lambda short: measure_with(args), report, args.short, args.out)


if __name__ == "__main__":
    main()
