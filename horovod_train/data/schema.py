"""dataset.json: what a TFRecord or LMDB directory holds. TF-free.

The converter writes it; the sources read it. It names the record layout (so that
every reader parses the same way) and, per split, the files with their record
counts. The counts make num_train_examples identical on every rank without anyone
reading the data; when they are absent the source counts them from the files.

Record layout (a serialized tf.train.Example, in TFRecord files and LMDB values):
  image:  "image" bytes (raw tensor bytes, or an encoded PNG/JPEG), "label" int64
  tokens: "tokens" int64[shape[0]], plus "label" int64 when task == "classify";
          for task == "lm" the model sees tokens[:-1] and predicts tokens[1:].
"""
import dataclasses
import json
import os

from horovod_train import fs
from horovod_train.errors import UsageError, usage_error

METADATA = "dataset.json"
FORMATS = ("tfrecord", "lmdb")
KINDS = ("image", "tokens")
ENCODINGS = ("raw", "encoded")
TASKS = ("classify", "lm")
DTYPES = ("float32", "uint8", "int32", "int64")
CONVERT_FIX = "write the directory with `python -m horovod_train.data convert`"


@dataclasses.dataclass(frozen=True)
class Schema:
    kind: str
    shape: tuple  # one stored example: (H, W, C) images, (length,) tokens
    dtype: str  # element type of raw images and tokens
    num_classes: int  # labels, or the vocabulary size for task == "lm"
    encoding: str = "raw"  # images only: raw tensor bytes, or PNG/JPEG bytes
    task: str = "classify"

    def __post_init__(self):
        for what, value, choices in (("kind", self.kind, KINDS), ("dtype", self.dtype, DTYPES),
                                     ("encoding", self.encoding, ENCODINGS),
                                     ("task", self.task, TASKS)):
            if value not in choices:
                raise usage_error(f"{METADATA} field {what!r}", value, f"one of {choices}",
                                  CONVERT_FIX)
        if not self.shape or any(int(d) <= 0 for d in self.shape) or self.num_classes < 1:
            raise usage_error(f"{METADATA} shape/num_classes", (self.shape, self.num_classes),
                              "positive dimensions and at least one class", CONVERT_FIX)
        if self.task == "lm" and (self.kind != "tokens" or self.shape[0] < 2):
            raise usage_error(f"{METADATA} task 'lm'", self.shape,
                              "token examples of length >= 2", CONVERT_FIX)

    @property
    def input_shape(self) -> tuple:
        if self.task == "lm":
            return (self.shape[0] - 1,)
        return tuple(self.shape)


@dataclasses.dataclass(frozen=True)
class Split:
    files: tuple  # TFRecord: file names in the directory; LMDB: the one environment dir
    records: tuple | None = None  # per file; None = count them from the files
    sizes: tuple | None = None  # bytes per file, to catch truncation without reading


@dataclasses.dataclass(frozen=True)
class Metadata:
    format: str
    schema: Schema
    splits: dict  # split name -> Split


def to_json(meta: Metadata) -> str:
    splits = {name: {k: list(v) for k, v in dataclasses.asdict(s).items() if v is not None}
              for name, s in meta.splits.items()}
    schema = dataclasses.asdict(meta.schema)
    schema["shape"] = list(schema["shape"])
    return json.dumps({"format": meta.format, **schema, "splits": splits}, indent=1)


def _split(name: str, raw: dict) -> Split:
    files = tuple(raw.get("files") or ())
    records = tuple(int(n) for n in raw["records"]) if "records" in raw else None
    sizes = tuple(int(n) for n in raw["sizes"]) if "sizes" in raw else None
    for what, values in (("records", records), ("sizes", sizes)):
        if values is not None and len(values) != len(files):
            raise usage_error(f"{METADATA} split {name!r} {what}", len(values),
                              f"one entry per file ({len(files)})", CONVERT_FIX)
    return Split(files, records, sizes)


def from_json(text: str, where: str) -> Metadata:
    try:
        raw = json.loads(text)
        schema = Schema(kind=raw["kind"], shape=tuple(int(d) for d in raw["shape"]),
                        dtype=raw["dtype"], num_classes=int(raw["num_classes"]),
                        encoding=raw.get("encoding", "raw"), task=raw.get("task", "classify"))
        splits = {name: _split(name, s) for name, s in raw["splits"].items()}
        return Metadata(raw["format"], schema, splits)
    except UsageError:
        raise  # a bad field, already named
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise usage_error(where, f"unreadable metadata ({type(err).__name__}: {err})",
                          "a dataset.json with format, kind, shape, dtype, num_classes, splits",
                          CONVERT_FIX) from None


def read(data_dir: str | None, fmt: str) -> Metadata:
    """The directory's metadata; UsageError for a missing path or an empty directory."""
    if not data_dir:
        raise usage_error("--data_dir", data_dir, f"the directory of a {fmt} dataset",
                          f"pass --data_dir=DIR ({CONVERT_FIX})")
    path = os.path.join(data_dir, METADATA)
    try:
        text = _metadata_text(data_dir, path, fmt)
    except OSError as err:  # a URL's filesystem refused: no such scheme, no access
        raise usage_error("--data_dir", f"{data_dir} ({err})", "a directory this process can "
                          "read", fs.ACCESS_FIX) from None
    meta = from_json(text, path)
    if meta.format != fmt:
        raise usage_error(path, f"format {meta.format!r}", f"format {fmt!r}",
                          f"pass --dataset={meta.format} for this directory")
    return meta


def _metadata_text(data_dir: str, path: str, fmt: str) -> str:
    if not fs.isdir(data_dir):
        raise usage_error("--data_dir", data_dir, "an existing directory", "fix the path")
    if not fs.isfile(path):
        state = "an empty directory" if not fs.listdir(data_dir) else \
            f"a directory without {METADATA}"
        raise usage_error("--data_dir", f"{data_dir} ({state})",
                          f"a {fmt} dataset directory holding {METADATA}", CONVERT_FIX)
    return fs.read_text(path)


def split_of(meta: Metadata, name: str, where: str, flag: str) -> Split:
    if name not in meta.splits or not meta.splits[name].files:
        raise usage_error(flag, name, f"a split listed in {where}: {sorted(meta.splits)}",
                          f"pass {flag}=<one of those>")
    return meta.splits[name]


class SchemaShape:
    """input_shape and num_classes of a file-backed source, read from its `schema`."""

    @property
    def input_shape(self) -> tuple:
        return self.schema.input_shape

    @property
    def num_classes(self) -> int:
        return self.schema.num_classes


def digest(data_dir: str) -> str:
    """The dataset description's digest: a remembered verdict holds for this one only."""
    import hashlib
    return hashlib.sha256(fs.read_bytes(os.path.join(data_dir, METADATA))).hexdigest()[:16]
