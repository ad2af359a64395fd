"""Python's own standard library as a byte-level language-modelling corpus.

Every Python install ships a few MB of real, varied text: the .py files under
sysconfig.get_paths()["stdlib"]. Nothing is downloaded. The corpus is
  - the stdlib's .py files, minus third-party and test code (EXCLUDED_DIRS);
  - split BY FILE: a file is validation when sha256(its path relative to the stdlib)
    falls in the first VALIDATION_PERCENT of the hash range, else train. The split
    depends only on the file's own path, so it never shifts when files come and go;
  - each split's files concatenated in sorted path order and cut into examples of
    seq_len + 1 bytes every seq_len bytes (x = bytes[i:i+L], y = bytes[i+1:i+L+1]):
    every byte after the first is a target exactly once; vocabulary 256;
  - written once as TFRecord shards (train examples in a seeded random order) plus
    dataset.json, then read by the ordinary TFRecord source, whose sharding rules
    apply: num_train_examples comes from dataset.json on every rank, each rank yields
    N // (batch * world) batches, evaluation reads every validation example once.

Where: --data_dir=DIR (an empty directory is filled with the default seq_len; a
directory already holding a pycorpus is reused as is), else a cache directory
~/.cache/horovod_train/pycorpus/L<seq_len>-<content hash>, so a different Python
gets its own copy. Ranks that start together build it once: the first takes a file
lock and builds, the others wait and reuse. Other lengths:
    python -m horovod_train.data.pycorpus --seq_len=256 --output_dir=DIR
and train with --dataset=pycorpus --data_dir=DIR.
"""
import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import platform
import sys
import sysconfig

import numpy as np

from horovod_train import console
from horovod_train.data import schema as schema_lib
from horovod_train.data import writers
from horovod_train.errors import UsageError, usage_error
from launch.argv import normalize_flag_names
from launch.redact import redact

DEFAULT_SEQ_LEN = 64  # bytes of context: a line or two of code; cheap enough for CPU minutes
VALIDATION_PERCENT = 1  # of the path-hash range: about 1% of the files and bytes
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test",
                           "__pycache__"})
SPLITS = ("train", "validation")
NUM_SHARDS = {"train": 16, "validation": 4}  # multiples of common world sizes
SHUFFLE_SEED = 0  # the order train examples are written in
CACHE_ROOT = os.path.join("~", ".cache", "horovod_train", "pycorpus")
INFO = "pycorpus.json"  # provenance: files, bytes and sequences per split
LOCK = ".pycorpus.lock"
VERSION = 1  # bump when the layout changes: it is part of the cache key


@dataclasses.dataclass(frozen=True)
class Corpus:
    root: str
    files: dict  # split -> tuple of relative paths, sorted
    data: dict  # split -> bytes: the split's files concatenated in that order

    @property
    def fingerprint(self) -> str:
        """sha256 of the layout version, every path and every byte: equal on two hosts
        exactly when they would build the same dataset."""
        h = hashlib.sha256(f"pycorpus-v{VERSION}".encode())
        for split in SPLITS:
            h.update(f"\0{split}\0{len(self.files[split])}\0".encode())
            h.update("\0".join(self.files[split]).encode())
            h.update(hashlib.sha256(self.data[split]).digest())
        return h.hexdigest()


def stdlib_root() -> str:
    return sysconfig.get_paths()["stdlib"]


def split_of(relpath: str) -> str:
    bucket = int(hashlib.sha256(relpath.encode()).hexdigest()[:8], 16) % 100
    return "validation" if bucket < VALIDATION_PERCENT else "train"


def list_files(root: str) -> list[str]:
    """Relative posix paths of the corpus's .py files under `root`, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS]
        rel = os.path.relpath(folder, root)
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.isfile(path):
                found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(found)


def read_corpus(root: str | None = None) -> Corpus:
    root = root or stdlib_root()
    names = list_files(root) if os.path.isdir(root) else []
    files = {split: tuple(n for n in names if split_of(n) == split) for split in SPLITS}
    data = {}
    for split in SPLITS:
        parts = []
        for name in files[split]:
            with open(os.path.join(root, name), "rb") as f:
                parts.append(f.read())
        data[split] = b"".join(parts)
    return Corpus(root, files, data)


def window_starts(num_bytes: int, seq_len: int) -> np.ndarray:
    """Starts of the (seq_len + 1)-byte examples: every seq_len bytes, none past the end."""
    return np.arange(0, max(num_bytes - seq_len, 0), seq_len, dtype=np.int64)


def _check_seq_len(seq_len) -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise usage_error("--seq_len", seq_len, "a positive integer (bytes per example)",
                          f"pass --seq_len={DEFAULT_SEQ_LEN}")


def _check_corpus(corpus: Corpus, seq_len: int) -> None:
    for split in SPLITS:
        if len(window_starts(len(corpus.data[split]), seq_len)) == 0:
            raise usage_error(f"pycorpus {split} split of {corpus.root}",
                              f"{len(corpus.files[split])} .py files, "
                              f"{len(corpus.data[split])} bytes",
                              f"more than seq_len = {seq_len} bytes in each split",
                              "run with a full Python install (its standard library sources), "
                              "or pass a smaller --seq_len to the builder")


def _records(tokens: np.ndarray, starts: np.ndarray, seq_len: int):
    for s in starts:
        yield writers.tokens_example(tokens[s:s + seq_len + 1].tolist())


def build(out_dir: str, seq_len: int = DEFAULT_SEQ_LEN, corpus: Corpus | None = None,
          progress: bool = False) -> dict:
    """Writes the dataset into `out_dir` (dataset.json last); returns its provenance."""
    _check_seq_len(seq_len)
    corpus = corpus or read_corpus()
    _check_corpus(corpus, seq_len)
    os.makedirs(out_dir, exist_ok=True)
    splits, info = {}, _info(corpus, seq_len)
    for split in SPLITS:
        tokens = np.frombuffer(corpus.data[split], np.uint8)
        starts = window_starts(len(tokens), seq_len)
        if split == "train":
            # Neighbouring windows share a file; a seeded order mixes files in every shard.
            starts = starts[np.random.default_rng(SHUFFLE_SEED).permutation(len(starts))]
        bar = writers.Progress(len(starts), f"pycorpus {split:<10}") if progress else None
        splits[split] = writers.write_tfrecord(out_dir, split, _records(tokens, starts, seq_len),
                                               len(starts), NUM_SHARDS[split], bar)
    with open(os.path.join(out_dir, INFO), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    schema = schema_lib.Schema("tokens", (seq_len + 1,), "int32", 256, task="lm")
    writers.write_metadata(out_dir, schema_lib.Metadata("tfrecord", schema, splits))
    return info


def _info(corpus: Corpus, seq_len: int) -> dict:
    counts = {split: {"files": len(corpus.files[split]), "bytes": len(corpus.data[split]),
                      "sequences": len(window_starts(len(corpus.data[split]), seq_len))}
              for split in SPLITS}
    return {"corpus": "python standard library .py files", "version": VERSION,
            "python": platform.python_version(), "root": corpus.root,
            "fingerprint": corpus.fingerprint, "seq_len": seq_len,
            "validation_percent": VALIDATION_PERCENT, "excluded_dirs": sorted(EXCLUDED_DIRS),
            "splits": counts, "files": {split: list(corpus.files[split]) for split in SPLITS}}


def read_info(data_dir: str) -> dict | None:
    path = os.path.join(data_dir, INFO)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _ours(name: str) -> bool:
    return name in (INFO, LOCK, schema_lib.METADATA, schema_lib.METADATA + ".tmp") or (
        name.endswith(".tfrecord") and name.startswith(tuple(f"{s}-" for s in SPLITS)))


def _usable(data_dir: str) -> bool:
    """True when `data_dir` holds a finished pycorpus; UsageError when it holds other data."""
    if os.path.isfile(os.path.join(data_dir, schema_lib.METADATA)):
        if read_info(data_dir) is None:
            raise usage_error("--data_dir", data_dir,
                              f"an empty directory or one written by pycorpus (with {INFO})",
                              "pass --dataset=tfrecord for this directory, or an empty --data_dir")
        return True
    strangers = [n for n in os.listdir(data_dir) if not _ours(n)]
    if strangers:
        raise usage_error("--data_dir", f"{data_dir} (holding {sorted(strangers)[:3]})",
                          "an empty directory, or one written by pycorpus",
                          "pass an empty or new directory, or leave --data_dir out to use the "
                          f"cache under {CACHE_ROOT}")
    return False  # empty, or a build that was interrupted: (re)build


def ensure(data_dir: str, seq_len: int = DEFAULT_SEQ_LEN, corpus: Corpus | None = None,
           progress: bool = False) -> dict:
    """Builds the dataset in `data_dir` unless it is there; returns its provenance.

    A file lock makes concurrent callers (the ranks of one host) build it once."""
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, LOCK), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _usable(data_dir):
                build(data_dir, seq_len, corpus, progress)
            return read_info(data_dir)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def default_dir(seq_len: int, corpus: Corpus) -> str:
    return os.path.join(os.path.expanduser(CACHE_ROOT),
                        f"L{seq_len}-{corpus.fingerprint[:12]}")


def _describe(info: dict, data_dir: str) -> str:
    parts = [f"{split} {c['files']} files {c['bytes'] / 1e6:.2f} MB {c['sequences']} sequences"
             for split, c in info["splits"].items()]
    return (f"pycorpus | Python {info['python']} stdlib (content {info['fingerprint'][:12]}), "
            f"seq_len {info['seq_len']}, byte vocab 256 | {' | '.join(parts)} | {data_dir}")


def load(data_config, *, peers=None):
    del peers  # nothing to verify: generated from the interpreter's own sources
    """The loop's source: the (built or cached) pycorpus read as a TFRecord dataset.

    Splits are train and validation; --eval_split=test (the default) means validation,
    as the corpus holds no separate test set."""
    from absl import logging

    from horovod_train.data import tfrecord
    if data_config.data_dir:
        data_dir = data_config.data_dir
        info = ensure(data_dir)
    else:
        corpus = read_corpus()
        data_dir = default_dir(DEFAULT_SEQ_LEN, corpus)
        info = ensure(data_dir, DEFAULT_SEQ_LEN, corpus)
    logging.info("data  | %s", _describe(info, data_dir))
    eval_split = "validation" if data_config.eval_split == "test" else data_config.eval_split
    return tfrecord.load(dataclasses.replace(data_config, data_dir=data_dir,
                                             eval_split=eval_split))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m horovod_train.data.pycorpus",
        description="Build the Python-stdlib byte-level LM dataset (TFRecord) once.",
        allow_abbrev=False)  # as every tool of the project: no abbreviations
    parser.add_argument("--seq_len", type=int, default=DEFAULT_SEQ_LEN,
                        help="bytes the model sees per example")
    parser.add_argument("--output_dir", default=None,
                        help=f"default: {CACHE_ROOT}/L<seq_len>-<hash>, which "
                        "--dataset=pycorpus finds by itself for the default seq_len")
    # Dashes in flag names mean underscores, as in every tool of the project.
    args = parser.parse_args(normalize_flag_names(sys.argv[1:] if argv is None else list(argv)))
    try:
        _check_seq_len(args.seq_len)
        corpus = read_corpus()
        out = args.output_dir or default_dir(args.seq_len, corpus)
        info = ensure(out, args.seq_len, corpus, progress=True)
    except UsageError as err:
        console.last_line(f"pycorpus: error: {err}")
        return 2
    print(redact(_describe(info, out)))
    return 0


if __name__ == "__main__":
    from horovod_train import commands
    commands.standalone(main)
