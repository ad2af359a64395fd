"""Validation of the data options in DataConfig. TF-free.

Lives next to the sources (not in config.py) so the rules sit with the code that
relies on them; DataConfig.__post_init__ calls validate() so a bad value fails
before TensorFlow is imported.
"""
import contextlib
import contextvars
import os

from horovod_train import fs
from horovod_train.errors import usage_error

# False while a command is checked on another machine than the one it will run on
# (`horovod_train check`, which `python -m launch slurm` runs on a login node): its local
# paths may exist only on the compute nodes, so their existence is not checked there.
_PATHS_HERE = contextvars.ContextVar("paths_here", default=True)


@contextlib.contextmanager
def paths_elsewhere():
    token = _PATHS_HERE.set(False)
    try:
        yield
    finally:
        _PATHS_HERE.reset(token)

NEEDS_DATA_DIR = ("tfrecord", "lmdb")
# Sources whose --data_dir must be on this machine's disk, and why.
LOCAL_ONLY = {"lmdb": "LMDB needs a local memory map",
              "pycorpus": "pycorpus builds its files under a local file lock"}


def parse_shape(value) -> tuple:
    """(224, 224, 3), [224, 224, 3], ["224", "224", "3"] or "224,224,3" -> (224, 224, 3)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        shape = tuple(int(str(v).strip()) for v in items)
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise usage_error("--synthetic_shape", value, "comma-separated positive sizes",
                          "pass e.g. --synthetic_shape=224,224,3")
    return shape


def check_lmdb_local(flag: str, path: str) -> None:
    """LMDB reads and writes through a memory map, which a URL cannot give."""
    _check_local(flag, path, "lmdb", "keep LMDB on local disk (copy a remote one down, e.g. "
                 "`gsutil -m cp -r`) and pass that path, or convert with --format=tfrecord")


def _check_local(flag: str, path: str, dataset: str, fix: str) -> None:
    if path and not fs.is_local(path):
        raise usage_error(flag, path, f"a local directory ({LOCAL_ONLY[dataset]})", fix)


def _check_data_dir(dc) -> None:
    """A local --data_dir must exist; a URL's is checked where the data loads, through
    its filesystem (validation imports no TensorFlow)."""
    if dc.dataset == "lmdb":
        check_lmdb_local("--data_dir", dc.data_dir)
    if dc.dataset == "pycorpus":
        _check_local("--data_dir", dc.data_dir, "pycorpus",
                     "build it on local disk (pass a local --data_dir), copy it, and read "
                     "the copy with --dataset=tfrecord")
    if dc.data_dir and fs.is_local(dc.data_dir) and _PATHS_HERE.get() and \
            not fs.isdir(dc.data_dir):
        raise usage_error("--data_dir", dc.data_dir, "an existing directory",
                          "create it or fix the path (bundled sets need no --data_dir)")


def _check_cache(cache: str) -> None:
    """A local file prefix needs its directory; a URL's is the filesystem's to refuse
    (an object store has no directories before its objects)."""
    if cache in ("", "memory") or not fs.is_local(cache) or not _PATHS_HERE.get():
        return
    parent = os.path.dirname(fs.absolute(cache))
    if not fs.isdir(parent):
        raise usage_error("--cache", cache, "'memory', or a file prefix in an existing directory",
                          f"create {parent} or pass --cache=memory")


def validate(dc) -> None:
    """Raises UsageError for the first bad data option of DataConfig `dc`."""
    if dc.dataset in NEEDS_DATA_DIR and not dc.data_dir:
        raise usage_error("--data_dir", dc.data_dir, f"the directory of the {dc.dataset} dataset",
                          "pass --data_dir=DIR (write one with `python -m horovod_train.data "
                          "convert`)")
    if dc.dataset == "tfds" and not dc.tfds_name:
        raise usage_error("--tfds_name", dc.tfds_name, "a TFDS builder name such as mnist",
                          "pass --tfds_name=NAME (and --data_dir=DIR holding the prepared data)")
    if dc.shuffle_buffer < 0:
        raise usage_error("--shuffle_buffer", dc.shuffle_buffer, "0 (automatic) or a positive size",
                          "pass --shuffle_buffer=0")
    if dc.synthetic_examples < 16:
        raise usage_error("--synthetic_examples", dc.synthetic_examples,
                          "at least 16 (an eighth is held out for evaluation)",
                          "pass --synthetic_examples=4096")
    for flag, split in (("--train_split", dc.train_split), ("--eval_split", dc.eval_split)):
        if not split:
            raise usage_error(flag, split, "a split name such as train or test", f"pass {flag}=NAME")
    _check_data_dir(dc)
    _check_cache(dc.cache)
