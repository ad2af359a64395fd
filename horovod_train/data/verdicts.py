"""Each TFRecord file verified once: split across the ranks, and remembered.

Before step 1 every record of the data must be known readable (or skipped and counted
under --skip_corrupt), with every rank holding the same counts, so that every rank
plans the same steps and all refuse or skip together. Scanning every file on every
rank costs each rank a pass over the whole dataset at every launch. Instead:

  - the files are split across the ranks (rank r scans every size-th file still to be
    checked), and every rank gets every verdict by one allgather, before step 1;
  - the chief remembers the verdicts beside the data (MEMORY_FILE in the data
    directory, or under ~/.cache/horovod_train/verified/ when that is read-only), each
    keyed by the file's name, size and modification time and the dataset's schema, so
    a relaunch scans only what changed. The chief reads the memory and shares what it
    knows, so ranks that do not share a filesystem still agree.

The data directory may be a URL (fs.py): the memory is read and written through the
same filesystem, and a memory that does not parse counts as none, so a reader never
trusts half a file even where the filesystem's rename is not atomic.
"""
import contextlib
import dataclasses
import hashlib
import json
import os
import time

from absl import logging

from horovod_train import fs

MEMORY_FILE = ".horovod_train-verified.json"
MEMORY_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Verdict:
    good: int  # readable records
    error: str | None = None  # the first failure, None when all read
    first_bad: int | None = None  # its record index


def check_files(paths, scan_files, peers=None, memory=None) -> list[Verdict]:
    """A Verdict per path. scan_files(paths) -> [verify.Scan] scans the given files on
    this rank; `peers` (a Communicator, None alone) splits the work and shares the
    verdicts; `memory` (a Memory, or None) skips what a run before already checked."""
    rank, size = (peers.info.rank, peers.info.size) if peers is not None else (0, 1)
    known = memory.known(paths) if memory is not None and rank == 0 else {}
    if size > 1:
        known = peers.broadcast_object(known, 0)
    todo = [i for i in range(len(paths)) if i not in known]
    mine = todo[rank::size]
    started = time.perf_counter()
    found = {i: _verdict(s) for i, s in zip(mine, scan_files([paths[i] for i in mine]))}
    if size > 1:
        for part in peers.allgather_object(found):
            found.update(part)
    if todo:
        logging.info("data | verified %d of %d files (%d across %d ranks), %d remembered, "
                     "in %.1f s", len(todo), len(paths), len(mine), size, len(known),
                     time.perf_counter() - started)
    verdicts = {**known, **found}
    if memory is not None and rank == 0 and todo:
        memory.remember(paths, verdicts)
    return [verdicts[i] for i in range(len(paths))]


def _verdict(scan) -> Verdict:
    return Verdict(len(scan.good), scan.error, scan.first_bad)


class Memory:
    """The verdicts of one data directory's files for one schema, on disk."""

    def __init__(self, data_dir: str, schema_key: str, cache_root: str | None = None):
        # A URL as given: it names the same place from every machine.
        self.data_dir, self.schema_key = fs.absolute(data_dir), schema_key
        self.cache_root = cache_root or os.path.join(
            os.path.expanduser("~"), ".cache", "horovod_train", "verified")

    def _places(self) -> list[str]:
        """Where the memory may be: beside the data, then this user's cache."""
        digest = hashlib.sha256(self.data_dir.encode()).hexdigest()[:16]
        return [os.path.join(self.data_dir, MEMORY_FILE),
                os.path.join(self.cache_root, f"{digest}.json")]

    def known(self, paths) -> dict[int, Verdict]:
        """{index: Verdict} of the paths whose name, size and time are as remembered."""
        entries = {}
        for place in reversed(self._places()):  # beside the data wins
            entries.update(self._read(place))
        out = {}
        for i, path in enumerate(paths):
            entry = entries.get(os.path.basename(path))
            stamp = _stamp(path) if entry is not None else None
            if stamp is not None and entry["stamp"] == stamp:
                out[i] = Verdict(entry["good"], entry["error"], entry["first_bad"])
        return out

    def remember(self, paths, verdicts: dict[int, Verdict]):
        entries = {os.path.basename(p): dict(dataclasses.asdict(verdicts[i]), stamp=_stamp(p))
                   for i, p in enumerate(paths) if i in verdicts}
        for place in self._places():
            merged = dict(self._read(place), **entries)
            if _write(place, {"version": MEMORY_VERSION, "schema": self.schema_key,
                              "files": merged}):
                return
        logging.warning("data | could not remember the verified files (read-only data "
                        "directory and cache): the next launch verifies them again")

    def forget(self):
        """Drops what is remembered of this directory (`python -m horovod_train.data
        verify` reads every record again)."""
        for place in self._places():
            with contextlib.suppress(OSError):
                fs.remove(place)

    def _read(self, place: str) -> dict:
        try:
            memory = json.loads(fs.read_text(place))
        except (OSError, ValueError):
            return {}
        if not isinstance(memory, dict) or memory.get("version") != MEMORY_VERSION or \
                memory.get("schema") != self.schema_key:
            return {}
        files = memory.get("files")
        return files if isinstance(files, dict) else {}


def _stamp(path: str) -> list | None:
    """[size, modification time in ns] of a file; a rewrite changes one of them. Where
    the filesystem keeps no time (TF's ram://), [size, "crc32:<checksum>"]: one read of
    the bytes, far cheaper than parsing and decoding every record, and a size alone
    would miss a same-sized rewrite. None when the file cannot be read."""
    try:
        st = fs.stat(path)
        return [st.size, st.mtime_ns if st.mtime_ns else f"crc32:{fs.crc32(path):08x}"]
    except OSError:
        return None


def _write(place: str, memory: dict) -> bool:
    """Writes aside, then renames (fs.write_atomic). False if it cannot."""
    try:
        fs.makedirs(os.path.dirname(place))
        fs.write_atomic(place, json.dumps(memory).encode("utf-8"))
        return True
    except OSError:
        return False
