"""When a checkpoint directory counts: how it is written, committed, judged and removed.
The one rule that loading, pruning and writing follow. TF-free for local paths.

A checkpoint `ckpt-<step>` holds meta.json, state.npz and COMMIT, written in that order.
COMMIT, the marker, comes last: a small JSON object with the step and each file's size
and CRC-32. A directory is committed when its marker names its step and its files have
the sizes the marker lists (a stat each: cheap enough for every save's prune); the
reader also checks meta.json's CRC-32 (it reads the file anyway), and state.npz's bytes
are checked by its zip members' own CRC-32s as np.load reads them. So a torn or damaged
file is never taken for a whole one.

Where a directory renames atomically (fs.renames_atomically: local disks, HDFS), all
three are first written under `.partial-ckpt-*` and renamed to `ckpt-<step>` when whole,
as before the marker existed. Every `ckpt-*` there appeared whole, so one without a
marker is committed too when its meta.json reads and does not claim the marker: older
versions wrote it, committing by the rename alone. Elsewhere (gs://, s3://, ram://: a
directory "rename" copies file by file, or loses the files) the files are written under
the final name and only the marker commits; meta.json says so (CLAIM_FIELD), so a
checkpoint of this code never passes for an older one.

A removal reverses the order: where renaming is atomic the directory is renamed aside
(`.pruning-*`) and then deleted; elsewhere the marker goes first, then state.npz, then
meta.json. Cut short either way, it leaves an uncommitted directory, never half a
checkpoint that counts.

An uncommitted `ckpt-*` is never loaded nor counted toward --keep_checkpoints. The writer
(it holds the writer lock) deletes one only when it is provably what a write or a
removal of this code left (Verdict.leftover): no marker (an empty one is a marker whose
write had not begun), nothing but meta.json and state.npz, and either a meta.json that
claims the marker or no meta.json (nor state.npz) at all. Anything else (damaged after
its commit, another version's, a user's copy) is left for a person to judge.
"""
import contextlib
import dataclasses
import json
import os
import re
import time
import uuid
import zlib

from horovod_train import fs

META, STATE, MARKER = "meta.json", "state.npz", "COMMIT"
# The meta.json field of a checkpoint the marker commits (absent in older versions').
CLAIM_FIELD, CLAIM = "commit", "marker"
# Names that never look like a checkpoint: a write not yet renamed, a removal under way.
PARTIAL, PRUNING = ".partial-ckpt-", ".pruning-"
# A directory moved out of a save's way: the ckpt-<step> name followed by this and a time.
SET_ASIDE = ".set-aside-"
NAME_PATTERN = re.compile(r"^ckpt-(\d{9})$")


@dataclasses.dataclass(frozen=True)
class Verdict:
    why_not: str | None  # None: committed
    leftover: bool = False  # uncommitted, and provably a cut-short write or removal


def name(step: int) -> str:
    return f"ckpt-{step:09d}"


def step_of(path: str) -> int | None:
    """The step a `ckpt-<step>` directory is named for; None for any other name."""
    found = NAME_PATTERN.match(os.path.basename(path))
    return int(found.group(1)) if found else None


def write(directory: str, step: int, meta: dict, write_state) -> str:
    """Writes and commits `ckpt-<step>` (replacing one of that step); returns its path.
    `write_state(stream)` writes state.npz. Raises OSError as the filesystem gave it,
    after deleting what it wrote."""
    final = os.path.join(directory, name(step))
    atomic = fs.renames_atomically(directory)
    where = os.path.join(directory, f"{PARTIAL}{step:09d}-{uuid.uuid4().hex[:8]}") \
        if atomic else final
    fs.makedirs(directory)
    if not atomic and fs.exists(final):
        remove(final)
    try:
        fs.makedirs(where)
        text = json.dumps({**meta, CLAIM_FIELD: CLAIM}, indent=2).encode()
        files = {META: fs.write_stream(os.path.join(where, META), lambda f: f.write(text)),
                 STATE: fs.write_stream(os.path.join(where, STATE), write_state)}
        marker = json.dumps({"step": step, "files": {
            file: {"size": w.size, "crc32": w.crc32} for file, w in files.items()}})
        fs.write_stream(os.path.join(where, MARKER), lambda f: f.write(marker.encode()))
        if atomic:
            if fs.exists(final):
                remove(final)
            fs.rename(where, final)  # the commit point where renaming is atomic
    except BaseException:
        with contextlib.suppress(OSError):
            if atomic:
                fs.rmtree(where)
            else:
                remove(where)
        raise
    return final


def inspect(path: str) -> Verdict:
    """Whether `path` is a committed checkpoint, and if not, why and whether it is a
    leftover the writer may delete (see the module's doc)."""
    try:
        entries = fs.listdir(path)
        marker, meta = (fs.read_bytes(os.path.join(path, file)) if file in entries else b""
                        for file in (MARKER, META))
        if marker:
            return Verdict(_against_marker(path, marker, meta, entries))
    except OSError as err:
        return Verdict(f"cannot read it ({err})")
    claims = _claims_marker(meta)
    if claims is False and fs.renames_atomically(path):
        return Verdict(None)  # committed by its rename, before markers
    leftover = set(entries) <= {META, STATE, MARKER} and (
        claims is True if meta else STATE not in entries)
    return Verdict(f"not committed: no {MARKER} marker; {_unmarked(claims, leftover)}", leftover)


def _unmarked(claims: bool | None, leftover: bool) -> str:
    if leftover:
        return "a write or removal cut short"
    if claims is None:
        return f"{META} unreadable or missing"
    if claims:
        return f"other files beside {META} and {STATE}"
    return ("written by an older version, committed by a rename, which this filesystem does "
            "not do atomically; to resume from it, copy it to a local --checkpoint_dir")


def _claims_marker(meta: bytes) -> bool | None:
    """Whether meta.json says the marker commits it; None when it is no JSON object."""
    try:
        parsed = json.loads(meta)
    except ValueError:
        return None
    return parsed.get(CLAIM_FIELD) == CLAIM if isinstance(parsed, dict) else None


def _against_marker(path: str, marker: bytes, meta: bytes, entries) -> str | None:
    """Why the files differ from what the marker lists, or None when they match."""
    try:
        stated = json.loads(marker)
        files, step = stated["files"], stated["step"]
        sizes = {file: (files[file]["size"], files[file]["crc32"]) for file in (META, STATE)}
    except (ValueError, KeyError, TypeError) as err:
        return f"its {MARKER} marker is not one this code writes ({err!r})"
    if step != step_of(path):
        return f"its {MARKER} marker is for step {step!r}"
    if (len(meta), zlib.crc32(meta)) != sizes[META]:
        return f"{META} differs from its {MARKER} marker ({len(meta)} bytes, CRC-32 " \
               f"{zlib.crc32(meta)}; marked {sizes[META][0]} bytes, CRC-32 {sizes[META][1]})"
    size = fs.stat(os.path.join(path, STATE)).size if STATE in entries else None
    if size != sizes[STATE][0]:
        return f"{STATE} has {size if size is not None else 'no'} bytes, its {MARKER} " \
               f"marker {sizes[STATE][0]}"
    return None


def remove(path: str) -> None:
    """Deletes a checkpoint directory so that a removal cut short leaves nothing that
    counts (see the module's doc). Raises OSError when the filesystem refuses."""
    if fs.renames_atomically(path):
        aside = os.path.join(os.path.dirname(path), PRUNING + os.path.basename(path))
        _rmtree_quietly(aside)  # a leftover of an earlier removal cut short
        fs.rename(path, aside)
        _rmtree_quietly(aside)
        return
    for file in (MARKER, STATE, META):
        with contextlib.suppress(FileNotFoundError):
            fs.remove(os.path.join(path, file))
    with contextlib.suppress(FileNotFoundError):  # an object store drops an empty "directory"
        fs.rmtree(path)


def set_aside(path: str) -> str:
    """Moves the checkpoint directory `path` to `<path>.set-aside-<UTC time>`, a name no
    checkpoint has (never loaded, counted nor deleted), and returns that path. Where a
    directory's rename is not atomic, file by file with the marker last: cut short, what
    is left at `path` still holds the marker, so it is never taken for a leftover."""
    aside = f"{path}{SET_ASIDE}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    if fs.exists(aside):
        aside = f"{aside}-{uuid.uuid4().hex[:8]}"
    if fs.renames_atomically(path):
        fs.rename(path, aside)
        return aside
    moves = []
    for folder, _, files in fs.walk(path):
        target = os.path.normpath(os.path.join(aside, os.path.relpath(folder, path)))
        fs.makedirs(target)
        moves += [(os.path.join(folder, f), os.path.join(target, f)) for f in files]
    for src, dst in sorted(moves, key=lambda move: os.path.basename(move[0]) == MARKER):
        fs.rename(src, dst)
    fs.rmtree(path)
    return aside


def clean_aside(directory: str) -> None:
    """Deletes `.partial-ckpt-*` and `.pruning-*`: never valid, and the writer (it holds
    the writer lock) is the directory's only writer."""
    for entry in fs.listdir(directory):
        if entry.startswith((PARTIAL, PRUNING)):
            _rmtree_quietly(os.path.join(directory, entry))


def _rmtree_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        fs.rmtree(path)
