"""Converter: numpy arrays, image folders or text -> TFRecord shards or an LMDB.

Inputs (detected from the path):
  x.npz         arrays x_train, y_train[, x_test, y_test] (or x, y): images/dense
                tensors, or integer 2-D arrays as token sequences with labels;
  folder/       one sub-folder per class of PNG/JPEG images (or train/ and test/
                folders that each hold the class folders);
  text.txt|dir  UTF-8/bytes text -> byte tokens (vocabulary 256) in windows of
                seq_len + 1 for language modelling.
Without an explicit test set, a seeded eval_fraction of the examples is held out.
Training examples are written in a seeded random order, so every shard mixes classes.
"""
import dataclasses
import io
import numbers
import os

import numpy as np

from horovod_train import fs
from horovod_train.data import options, writers
from horovod_train.data import schema as schema_lib
from horovod_train.errors import usage_error

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
IMAGE_SIZE_FIX = "pass --image_size=224 (224x224) or --image_size=224,160 (height,width)"


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    input: str
    output_dir: str
    format: str = "tfrecord"
    num_shards: int = 8  # TFRecord files per split (fewer if there are fewer examples)
    eval_fraction: float = 0.1  # held out when the input has no test set
    seed: int = 0
    seq_len: int = 128  # text: tokens the model sees per example
    image_size: tuple | None = None  # (height, width); default: the first image's size
    channels: int = 3  # image folders: 1 (grayscale) or 3 (RGB)
    encoding: str = "raw"  # numpy uint8 images: raw bytes or png
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self):
        if self.format not in schema_lib.FORMATS:
            raise usage_error("--format", self.format, f"one of {schema_lib.FORMATS}",
                              "pass --format=tfrecord or --format=lmdb")
        if not 0 <= self.eval_fraction < 1:
            raise usage_error("--eval_fraction", self.eval_fraction, "a number in [0, 1)",
                              "pass --eval_fraction=0.1")
        for flag, value in (("--num_shards", self.num_shards), ("--seq_len", self.seq_len)):
            if value < 1:
                raise usage_error(flag, value, "a positive integer", f"pass {flag}=8")
        if self.channels not in (1, 3) or self.encoding not in ("raw", "png"):
            raise usage_error("--channels/--encoding", (self.channels, self.encoding),
                              "channels 1 or 3, encoding raw or png", "pass --channels=3")
        if self.format == "lmdb":
            options.check_lmdb_local("--output_dir", self.output_dir)
        if self.image_size is not None and not _is_size(self.image_size):
            raise usage_error("--image_size", self.image_size,
                              "(height, width): two positive integers", IMAGE_SIZE_FIX)


def _is_size(size) -> bool:
    return (isinstance(size, (tuple, list)) and len(size) == 2 and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in size))


@dataclasses.dataclass(frozen=True)
class Prepared:
    schema: schema_lib.Schema
    splits: dict  # split name -> (count, make) with make() iterating serialized records


def _holdout(n: int, opts: ConvertOptions) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(opts.seed).permutation(n)
    n_eval = int(round(n * opts.eval_fraction))
    return perm[n_eval:], np.sort(perm[:n_eval])


def _npz_arrays(path: str):
    with fs.open_file(path, "rb") as f, np.load(f) as z:
        keys = set(z.files)
        if {"x_train", "y_train"} <= keys:
            test = (z["x_test"], z["y_test"]) if {"x_test", "y_test"} <= keys else None
            return z["x_train"], z["y_train"], test
        if {"x", "y"} <= keys:
            return z["x"], z["y"], None
    raise usage_error(f"--input {path}", f"arrays {sorted(keys)}",
                      "x_train and y_train (optionally x_test, y_test), or x and y",
                      "save them with np.savez(path, x_train=..., y_train=..., ...)")


def _numpy_schema(x: np.ndarray, num_classes: int, opts: ConvertOptions):
    if np.issubdtype(x.dtype, np.integer) and x.ndim == 2:
        return schema_lib.Schema("tokens", x.shape[1:], "int32", num_classes), x
    if x.ndim == 3:
        x = x[..., None]  # (N, H, W) grayscale -> (N, H, W, 1), what conv models take
    if x.dtype != np.uint8:
        x = x.astype(np.float32)
    encoding = "encoded" if opts.encoding == "png" else "raw"
    if encoding == "encoded" and (x.dtype != np.uint8 or x.ndim != 4 or x.shape[-1] not in (1, 3)):
        raise usage_error("--encoding", "png", "uint8 images of shape (N, H, W, 1 or 3)",
                          "pass --encoding=raw")
    return schema_lib.Schema("image", x.shape[1:], str(x.dtype), num_classes, encoding), x


def _png(image: np.ndarray) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buf, "PNG")
    return buf.getvalue()


def _array_records(schema, x, y):
    for xi, yi in zip(x, y):
        if schema.kind == "tokens":
            yield writers.tokens_example(xi, int(yi))
        else:
            yield writers.image_example(_png(xi) if schema.encoding == "encoded"
                                        else np.ascontiguousarray(xi).tobytes(), int(yi))


def _from_numpy(opts: ConvertOptions) -> Prepared:
    x, y, test = _npz_arrays(opts.input)
    if test is None:
        train_idx, test_idx = _holdout(len(x), opts)
        test, (x, y) = (x[test_idx], y[test_idx]), (x[train_idx], y[train_idx])
    else:
        order = np.random.default_rng(opts.seed).permutation(len(x))
        x, y = x[order], y[order]
    num_classes = int(max(y.max(initial=0), test[1].max(initial=0))) + 1
    schema, x = _numpy_schema(x, num_classes, opts)
    _, x_test = _numpy_schema(test[0], num_classes, opts)
    return Prepared(schema, {
        "train": (len(x), lambda: _array_records(schema, x, y)),
        "test": (len(x_test), lambda: _array_records(schema, x_test, test[1]))})


def _class_files(root: str, classes=None):
    classes = classes or sorted(d for d in fs.listdir(root) if fs.isdir(os.path.join(root, d)))
    pairs = []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        files = sorted(f for f in fs.listdir(folder) if f.lower().endswith(IMAGE_EXTS)) \
            if fs.isdir(folder) else []
        pairs += [(os.path.join(folder, f), label) for f in files]
    if not pairs:
        raise usage_error(f"--input {root}", "no images", f"class sub-folders of {IMAGE_EXTS} "
                          "files", "point --input at the folder holding one folder per class")
    return pairs, classes


def _encode_image(path: str, size: tuple, channels: int) -> bytes:
    """The file's own bytes when they already decode to the target; else a PNG."""
    from PIL import Image
    mode = "L" if channels == 1 else "RGB"
    try:
        data = fs.read_bytes(path)
        with Image.open(io.BytesIO(data)) as im:
            if im.format in ("PNG", "JPEG") and im.size == (size[1], size[0]) and im.mode == mode:
                return data
            im = im.convert(mode)
            if im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]))
            buf = io.BytesIO()
            im.save(buf, "PNG")
            return buf.getvalue()
    except OSError as err:
        raise usage_error(f"image {path}", f"an unreadable file ({err})", "a PNG or JPEG image",
                          "remove or replace the file") from None


def _image_size(path: str, opts: ConvertOptions) -> tuple:
    if opts.image_size:
        return tuple(opts.image_size)
    from PIL import Image
    with fs.open_file(path, "rb") as f, Image.open(f) as im:
        return im.size[1], im.size[0]


def _from_images(opts: ConvertOptions) -> Prepared:
    train_dir, test_dir = (os.path.join(opts.input, s) for s in ("train", "test"))
    if fs.isdir(train_dir) and fs.isdir(test_dir):
        train, classes = _class_files(train_dir)
        test, _ = _class_files(test_dir, classes)
        train = [train[i] for i in np.random.default_rng(opts.seed).permutation(len(train))]
    else:
        pairs, classes = _class_files(opts.input)
        train_idx, test_idx = _holdout(len(pairs), opts)
        train, test = [pairs[i] for i in train_idx], [pairs[i] for i in test_idx]
    size = _image_size(train[0][0], opts)
    schema = schema_lib.Schema("image", (*size, opts.channels), "uint8", len(classes), "encoded")
    # label i is line i
    fs.write_atomic(os.path.join(opts.output_dir, "labels.txt"),
                    ("\n".join(classes) + "\n").encode("utf-8"))

    def records(pairs):
        return lambda: (writers.image_example(_encode_image(p, size, opts.channels), label)
                        for p, label in pairs)
    return Prepared(schema, {"train": (len(train), records(train)),
                             "test": (len(test), records(test))})


def _from_text(opts: ConvertOptions) -> Prepared:
    if fs.isdir(opts.input):
        paths = sorted(os.path.join(d, f) for d, _, files in fs.walk(opts.input)
                       for f in files if f.endswith(".txt"))
    else:
        paths = [opts.input]
    data = b"".join(fs.read_bytes(p) for p in paths)
    length = opts.seq_len + 1
    # Windows overlap by one token, so every token is a prediction target once.
    starts = np.arange(0, max(len(data) - length + 1, 0), opts.seq_len)
    if len(starts) == 0:
        raise usage_error(f"--input {opts.input}", f"{len(data)} bytes of text",
                          f"at least seq_len + 1 = {length} bytes", "pass a smaller --seq_len")
    train_idx, test_idx = _holdout(len(starts), opts)
    tokens = np.frombuffer(data, np.uint8)
    schema = schema_lib.Schema("tokens", (length,), "int32", 256, task="lm")

    def records(idx):
        return lambda: (writers.tokens_example(tokens[s:s + length]) for s in starts[idx])
    return Prepared(schema, {"train": (len(train_idx), records(train_idx)),
                             "test": (len(test_idx), records(test_idx))})


def input_kind(path: str) -> str:
    """numpy, text or images, from the path alone (before anything is written); bad
    input is refused here, so the command line calls it before TensorFlow loads too."""
    try:
        return _kind_of(path)
    except OSError as err:  # a URL's filesystem refused: no such scheme, no access
        raise usage_error("--input", f"{path} ({err})", "a path this process can read",
                          fs.ACCESS_FIX) from None


def _kind_of(path: str) -> str:
    if fs.isfile(path) and path.endswith(".npz"):
        return "numpy"
    if fs.isfile(path) and path.endswith(".txt"):
        return "text"
    if fs.isdir(path):
        entries = fs.listdir(path)
        if any(fs.isdir(os.path.join(path, e)) for e in entries):
            return "images"
        if any(e.endswith(".txt") for e in entries):
            return "text"
    state = "a missing path" if not fs.exists(path) else "an unsupported input"
    raise usage_error("--input", f"{path} ({state})",
                      "a .npz file, a .txt file or folder of .txt files, or a folder of class "
                      "folders of images", "pass --input=<an existing file or folder of those>")


def _make_output_dir(out: str) -> None:
    """Creates --output_dir; a path that is (or lies under) a regular file is bad input."""
    try:
        fs.makedirs(out)  # still refuses an existing file
    except OSError as err:
        state = "a regular file" if fs.isfile(out) else \
            f"a path that cannot be created: {err.strerror or err}"
        raise usage_error("--output_dir", f"{out} ({state})", "a directory, new or existing",
                          "pass --output_dir=<a directory path>") from None


def _prepare_output(opts: ConvertOptions) -> None:
    _make_output_dir(opts.output_dir)
    path = os.path.join(opts.output_dir, schema_lib.METADATA)
    if fs.exists(path):
        if not opts.overwrite:
            raise usage_error("--output_dir", opts.output_dir, "a directory without a dataset",
                              "pick a new --output_dir, or pass --overwrite")
        # Remove the old dataset's files: a stale shard or LMDB would mix into the new one.
        old = schema_lib.from_json(fs.read_text(path), path)
        fs.remove(path)
        for split in old.splits.values():
            for name in split.files:
                target = os.path.join(opts.output_dir, name)
                fs.rmtree(target) if fs.isdir(target) else fs.remove(target)


def convert(opts: ConvertOptions) -> schema_lib.Metadata:
    """Writes the dataset and its dataset.json; returns the metadata written."""
    kind = input_kind(opts.input)
    _prepare_output(opts)
    prepared = {"numpy": _from_numpy, "text": _from_text, "images": _from_images}[kind](opts)
    splits = {}
    for name, (count, make) in prepared.splits.items():
        progress = writers.Progress(count, f"{name:<5} -> {opts.format}") if opts.progress else None
        if opts.format == "tfrecord":
            splits[name] = writers.write_tfrecord(opts.output_dir, name, make(), count,
                                                  opts.num_shards, progress)
        else:
            splits[name] = writers.write_lmdb(opts.output_dir, name, make(), count, progress)
    meta = schema_lib.Metadata(opts.format, prepared.schema, splits)
    writers.write_metadata(opts.output_dir, meta)
    return meta
