"""bench/data_scale.py's TensorFlow side: writes its data sets and times start-up.

  python bench/data_scale_worker.py files DIR --train_files N --eval_files M --records R
  python bench/data_scale_worker.py load DIR --workers 8,64 [--noverify]
  python bench/data_scale_worker.py images DIR --records N --size 16
  python bench/data_scale_worker.py npz PATH --records N --size 16
  python bench/data_scale_worker.py text PATH --records N --seq_len 128
  python bench/data_scale_worker.py evalset DIR --eval_mb MB

Each prints one JSON line. Records are written straight from a few serialized
examples (their contents do not matter here, their number and size do), so writing
10,000 files or 2 GB takes seconds.
"""
import argparse
import gc
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

EVAL_SHAPE = (64, 64, 3)  # 12 KiB raw a record: a 2 GB split in ~170,000 records
EVAL_FILE_MB = 64
CLASSES = 10


def _examples(shape, count: int = CLASSES) -> list:
    from horovod_train.data import writers
    rng = np.random.default_rng(0)
    return [writers.image_example(rng.integers(0, 256, shape, dtype=np.uint8).tobytes(), i)
            for i in range(count)]


def _write_split(out_dir: str, split: str, files: int, per_file: int, examples):
    """`files` TFRecord files of `per_file` records each, cycling through `examples`."""
    import tensorflow as tf
    from horovod_train.data import schema as schema_lib
    names, sizes = [], []
    for i in range(files):
        names.append(f"{split}-{i:05d}-of-{files:05d}.tfrecord")
        path = os.path.join(out_dir, names[-1])
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(per_file):
                writer.write(examples[j % len(examples)])
        sizes.append(os.path.getsize(path))
    return schema_lib.Split(tuple(names), (per_file,) * files, tuple(sizes))


def _write_set(out_dir: str, shape, splits: dict) -> dict:
    """splits: name -> (files, records per file). Returns the bytes of each split."""
    from horovod_train.data import schema as schema_lib
    from horovod_train.data import writers
    os.makedirs(out_dir, exist_ok=True)
    examples = _examples(shape)
    written = {name: _write_split(out_dir, name, files, per_file, examples)
               for name, (files, per_file) in splits.items()}
    schema = schema_lib.Schema("image", tuple(shape), "uint8", CLASSES)
    writers.write_metadata(out_dir, schema_lib.Metadata("tfrecord", schema, written))
    return {name: sum(s.sizes) for name, s in written.items()}


def files(args) -> dict:
    import tensorflow  # noqa: F401  (its import is not the writing)
    started = time.perf_counter()
    sizes = _write_set(args.path, (8, 8, 1), {"train": (args.train_files, args.records),
                                               "test": (args.eval_files, args.records)})
    return {"write_s": time.perf_counter() - started, "bytes": sizes}


def evalset(args) -> dict:
    per_file = EVAL_FILE_MB * (1 << 20) // (int(np.prod(EVAL_SHAPE)) + 40)
    eval_files = max(1, round(args.eval_mb / EVAL_FILE_MB))
    import tensorflow  # noqa: F401  (its import is not the writing)
    started = time.perf_counter()
    sizes = _write_set(args.path, EVAL_SHAPE, {"train": (8, 128), "test": (eval_files, per_file)})
    return {"write_s": time.perf_counter() - started, "bytes": sizes,
            "eval_records": eval_files * per_file}


def _timed(fn, *args):
    # A full collection of TensorFlow's heap (0.2-0.27 s here) falls wherever the
    # allocations since its import trip it; that debt is the import's, so it is paid
    # before the clock starts, not inside whichever part it lands in.
    gc.collect()
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


def load(args) -> dict:
    """tfrecord.load and the first rank's read plan per worker count, as a launch pays
    them (TensorFlow already imported); then its parts again, each alone."""
    from horovod_train import config as cfg
    from horovod_train import fs
    from horovod_train.data import schema as schema_lib
    from horovod_train.data import sharding, tfrecord, verdicts
    config = cfg.DataConfig(dataset="tfrecord", data_dir=args.path, verify_data=args.verify)
    source, load_s = _timed(tfrecord.load, config)
    plans = {}
    for workers in args.workers:
        _, plans[workers] = _timed(sharding.plan_train_read, source.train.counts,
                                   sharding.ShardInfo(0, workers), 32)
    paths = source.train.paths + source.eval.paths
    parts = {
        "parse_s": _timed(schema_lib.read, args.path, "tfrecord")[1],
        "stat_s": _timed(lambda: [fs.stat(p).size for p in paths if fs.isfile(p)])[1],
        "memory_s": _timed(verdicts.Memory(args.path, schema_lib.digest(args.path)).known,
                           paths)[1],
    }
    return {"load_s": load_s, "plan_s": plans, "files": len(paths), **parts,
            "records": source.num_train_examples + sum(source.eval.counts)}


def images(args) -> dict:
    """`records` PNGs of size x size in CLASSES class folders (a few distinct images,
    each written many times: encoding is not what is measured)."""
    from PIL import Image
    rng = np.random.default_rng(0)
    blobs = []
    for _ in range(CLASSES):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (args.size, args.size, 3), np.uint8)).save(buf, "PNG")
        blobs.append(buf.getvalue())
    for c in range(CLASSES):
        os.makedirs(os.path.join(args.path, f"class{c}"), exist_ok=True)
    for i in range(args.records):
        with open(os.path.join(args.path, f"class{i % CLASSES}", f"{i:07d}.png"), "wb") as f:
            f.write(blobs[(i // CLASSES) % CLASSES])
    return {"images": args.records}


def npz(args) -> dict:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (args.records, args.size, args.size, 3), np.uint8)
    np.savez(args.path, x=x, y=rng.integers(0, CLASSES, args.records))
    return {"bytes": os.path.getsize(args.path)}


def text(args) -> dict:
    """Enough text for `records` windows of seq_len + 1 bytes."""
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    size = args.records * args.seq_len + 1
    with open(args.path, "wb") as f:
        f.write((line * (size // len(line) + 1))[:size])
    return {"bytes": size}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["files", "load", "images", "npz", "text", "evalset"])
    parser.add_argument("path")
    parser.add_argument("--train_files", type=int, default=10000)
    parser.add_argument("--eval_files", type=int, default=100)
    parser.add_argument("--records", type=int, default=4)
    parser.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")],
                        default=[8, 64])
    parser.add_argument("--noverify", dest="verify", action="store_false")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--eval_mb", type=float, default=300)
    args = parser.parse_args(argv)
    print(json.dumps(globals()[args.command](args)), flush=True)


if __name__ == "__main__":
    main()
