"""`python -m horovod_train.data convert|verify ...`: build and check datasets.

  convert --input=PATH --output_dir=DIR [--format=tfrecord|lmdb] [--num_shards=8] ...
  verify  --data_dir=DIR [--skip_corrupt]

Bad input exits with code 2 and one line on stderr (received / expected / Fix).
"""
import argparse
import sys

from horovod_train import console
from horovod_train.errors import UsageError
from launch import usage
from launch.argv import normalize_flag_names
from launch.redact import redact

PROG = "horovod_train.data"


class _Parser(usage.Parser):
    error_type = UsageError


def _image_size(text: str) -> tuple[int, int]:
    """One size is a square (8 -> 8x8); two are height,width."""
    try:
        size = tuple(int(v) for v in text.split(","))
    except ValueError:
        size = ()
    if len(size) not in (1, 2) or min(size) < 1:
        from horovod_train.data.convert import IMAGE_SIZE_FIX
        raise argparse.ArgumentTypeError(
            f"received {text!r}; expected one positive integer (a square) or two, "
            f"height,width. Fix: {IMAGE_SIZE_FIX}")
    return size * 2 if len(size) == 1 else size


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="numpy / image folders / text -> TFRecord or LMDB")
    c.add_argument("--input", required=True, help=".npz, .txt, a folder of .txt, or class folders")
    c.add_argument("--output_dir", required=True)
    c.add_argument("--format", default="tfrecord", help="tfrecord or lmdb")
    c.add_argument("--num_shards", type=int, default=8, help="TFRecord files per split")
    c.add_argument("--eval_fraction", type=float, default=0.1,
                   help="held out when the input has no test set")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--seq_len", type=int, default=128, help="text: tokens per example")
    c.add_argument("--image_size", type=_image_size, default=None,
                   help="S (SxS) or H,W (default: the first image's size)")
    c.add_argument("--channels", type=int, default=3, help="image folders: 1 or 3")
    c.add_argument("--encoding", default="raw", help="numpy uint8 images: raw or png")
    c.add_argument("--overwrite", action="store_true")
    c.add_argument("--no_progress", action="store_true")
    v = sub.add_parser("verify", help="read, parse and decode every record once (every "
                       "encoded image too); report counts and damage")
    v.add_argument("--data_dir", required=True)
    v.add_argument("--skip_corrupt", action="store_true", help="count damage instead of failing")
    return parser


def _check_input(args) -> None:
    """A missing or unsupported local --input is refused before TensorFlow loads (about
    10 s); a URL is checked through its filesystem, which is TensorFlow's, after."""
    from horovod_train import fs
    from horovod_train.data import convert
    if args.command == "convert" and fs.is_local(args.input):
        convert.input_kind(args.input)


def _convert(args) -> None:
    from horovod_train.data import convert
    opts = convert.ConvertOptions(
        input=args.input, output_dir=args.output_dir, format=args.format,
        num_shards=args.num_shards, eval_fraction=args.eval_fraction, seed=args.seed,
        seq_len=args.seq_len, image_size=args.image_size, channels=args.channels,
        encoding=args.encoding, overwrite=args.overwrite, progress=not args.no_progress)
    meta = convert.convert(opts)
    counts = ", ".join(f"{name} {sum(s.records)} records in {len(s.files)} file(s)"
                       for name, s in meta.splits.items())
    print(f"wrote {redact(args.output_dir)}: {meta.format}, {meta.schema.kind} {meta.schema.shape}, "
          f"{meta.schema.num_classes} classes; {counts}")


def _verify(args) -> None:
    import json
    import os
    from horovod_train import config as cfg
    from horovod_train import data, fs
    from horovod_train.data import verdicts
    from horovod_train.data import schema as schema_lib
    meta_path = os.path.join(args.data_dir, schema_lib.METADATA)
    fmt = "tfrecord"  # without dataset.json, the tfrecord source reports what is missing
    try:
        found = fs.isfile(meta_path)
    except OSError:
        found = False  # the tfrecord source names the filesystem's refusal
    if found:
        fmt = json.loads(fs.read_text(meta_path)).get("format", fmt)
        # This command reads every record: nothing remembered.
        verdicts.Memory(args.data_dir, schema_lib.digest(args.data_dir)).forget()
    source = data.load(cfg.DataConfig(dataset=fmt, data_dir=args.data_dir, verify_data=True,
                                      skip_corrupt=args.skip_corrupt))
    print(f"ok {redact(args.data_dir)}: {source.num_train_examples} training examples, input "
          f"{source.input_shape}, {source.num_classes} classes, {source.skipped} skipped")


def parse_args(argv=None, prog: str = PROG) -> argparse.Namespace:
    """Dashes in flag names mean underscores, as in every tool of the project."""
    return _parser(prog).parse_args(normalize_flag_names(
        sys.argv[1:] if argv is None else list(argv)))


def main(argv=None, prog: str = PROG) -> int:
    try:
        args = parse_args(argv, prog)
        _check_input(args)
        # TF's C++ start-up lines (console.STARTUP_NOISE) come out while TF loads.
        with console.startup_filter():
            import tensorflow as tf  # loaded here, inside the filter, with its CUDA probe
            tf.config.list_physical_devices("GPU")
        _convert(args) if args.command == "convert" else _verify(args)
    except UsageError as err:
        console.last_line(usage.error_line(prog, err))
        return 2
    except SystemExit as done:  # --help
        return int(done.code or 0)
    return 0


if __name__ == "__main__":
    from horovod_train import commands
    commands.standalone(main)
