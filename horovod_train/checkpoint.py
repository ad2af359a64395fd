"""Checkpoints: the chief writes, atomically; every rank restores, then rank 0's copy
is broadcast.

A checkpoint is a directory `ckpt-<step>` holding `state.npz` (every model, optimizer
and loss-scale variable, each under its name) and `meta.json` (step, format, the names
in order, the config that shapes the state and the data order); checkpoint_format.py
says how arrays are named and checked. It is written under a temporary name and
renamed when complete, so a crash mid-write leaves the previous checkpoint intact and
no half-written one that looks valid. The data position needs no saving: the input
order is a pure function of (seed, epoch), so the step count says where to resume.

Only checkpoints this code can read are counted toward --keep_checkpoints or deleted;
a deleted one is renamed aside first, so an interrupted prune never leaves a
half-deleted `ckpt-*`. One job writes a directory: the chief holds an flock on
`.writer.lock` for the whole run, and a second job is refused naming the first.
"""
import dataclasses
import errno
import json
import os
import re
import shutil
import tempfile
import time
import zipfile

import numpy as np
from absl import logging

from horovod_train import filemode
from horovod_train.checkpoint_format import (FORMAT, check_format, check_names, check_shapes,
                                             is_positional, state_names, stored_keys,
                                             write_arrays)
from horovod_train.config import injected_delay
from horovod_train.errors import UsageError
from horovod_train.writer_lock import (ForeignWriter, acquire_writer_lock, foreign_writer,
                                       release_writer_lock)

_NAME = re.compile(r"^ckpt-(\d{9})$")
# Names list_checkpoints never matches: a write not yet committed, a prune under way.
_PARTIAL, _PRUNING = ".partial-ckpt-", ".pruning-"
# Config fields that change the shape of the state or the data order: a checkpoint made
# with other values cannot be continued exactly.
_MUST_MATCH = ("model", "data.dataset", "data.batch_size", "runtime.seed",
               "speed.grad_accum_steps", "speed.precision", "optim.optimizer")


def _field(config_dict, dotted):
    value = config_dict
    for part in dotted.split("."):
        value = value[part]
    return value


def fingerprint(config, facts: dict | None = None) -> dict:
    """The config fields that must match, plus facts of the run (world size, data
    shapes) as JSON would give them back (a tuple shape compares equal to its list)."""
    as_dict = dataclasses.asdict(config)
    return dict({name: _field(as_dict, name) for name in _MUST_MATCH}, **_plain(facts))


def _plain(facts: dict | None) -> dict:
    return json.loads(json.dumps(facts or {}, default=lambda o: getattr(o, "item", o.__str__)()))


def training_state(model, optimizer, loss_scale) -> list:
    """Every variable a resumed run needs, in a fixed order.

    model.variables, not model.weights: it also holds each dropout layer's seed
    generator state, without which a resumed run draws other dropout masks than the
    uninterrupted one and the two drift apart. Each is stored under its name:
    checkpoint_format.state_names."""
    return (list(model.variables) + list(optimizer.variables)
            + [loss_scale.scale, loss_scale.good_steps])


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of committed checkpoints, newest first (readable or not)."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), os.path.join(directory, name))
             for name in os.listdir(directory) if (m := _NAME.match(name))]
    return sorted(found, reverse=True)


def read_meta(path: str) -> dict:
    """A checkpoint's meta.json; ValueError naming the defect when it is not the object
    save() writes (so callers skip it like any other unreadable checkpoint)."""
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    if not isinstance(meta, dict):
        raise ValueError(f"meta.json holds a JSON {type(meta).__name__}, not an object")
    for key, kind in (("step", int), ("num_variables", int), ("fingerprint", dict)):
        if type(meta.get(key)) is not kind:  # `is`, so a JSON true is no count
            raise ValueError(f"meta.json field {key!r} is {meta.get(key)!r}, not a JSON "
                             f"{'object' if kind is dict else 'integer'}")
    check_format(meta)
    return meta


def _unreadable(path: str) -> str | None:
    """Why prune must not count this checkpoint, or None. Cheap: the arrays are not read."""
    try:
        read_meta(path)
    except (OSError, ValueError) as err:
        return str(err)
    return None if os.path.isfile(os.path.join(path, "state.npz")) else "no state.npz"


def save(directory: str, step: int, variables, config, keep: int, facts: dict | None = None):
    """Chief only. Raises UsageError (after cleaning up) when the disk refuses."""
    names = state_names(variables)  # before any write: a refusal leaves nothing behind
    final = os.path.join(directory, f"ckpt-{step:09d}")
    try:
        os.makedirs(directory, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=_PARTIAL, dir=directory)
    except OSError as err:
        raise _write_error(directory, err) from None
    try:
        os.chmod(tmp, filemode.new_dir_mode())  # mkdtemp's 0700 would outlive the rename
        with open(os.path.join(tmp, "state.npz"), "wb") as f:
            write_arrays(f, names, variables)
            f.flush()
            os.fsync(f.fileno())
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            # num_variables stays: older versions check it, then skip this checkpoint as
            # unreadable (no v00000) rather than misread it.
            json.dump({"format": FORMAT, "step": step, "num_variables": len(names),
                       "names": names, "fingerprint": fingerprint(config, facts)}, f, indent=2)
        if os.path.exists(final):
            _remove(final)
        os.rename(tmp, final)  # the commit point
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(directory, err) from None
    _prune(directory, keep, final)
    return final


def _write_error(directory, err) -> UsageError:
    if err.errno == errno.ENOENT:  # our own temporary dir is gone: someone else deleted it
        return UsageError(f"--checkpoint_dir: the checkpoint being written in {directory!r} "
                          f"vanished mid-write ({err.filename}: {err.strerror}); expected this "
                          f"job to be the only one writing there. Fix: give each job its own "
                          f"--checkpoint_dir, and clean it only while no job runs")
    return UsageError(f"--checkpoint_dir: cannot write a checkpoint in {directory!r} "
                      f"({err.strerror}); expected a writable directory with free space. "
                      f"Fix: free space or point --checkpoint_dir elsewhere; earlier "
                      f"checkpoints there are untouched")


_WARNED = set()  # unreadable dirs already named: one warning each, not one per save


def _prune(directory: str, keep: int, written: str):
    """Keeps `written` and the newest keep-1 other readable checkpoints; the rest go.

    Unreadable ones are neither counted nor deleted: they may be another version's,
    or a user's, and counting them would delete the good ones instead."""
    readable, unreadable = [], []
    for _, path in list_checkpoints(directory):
        reason = _unreadable(path)
        (unreadable if reason else readable).append((path, reason))
    new = [f"{path} ({reason})" for path, reason in unreadable if path not in _WARNED]
    if new:
        logging.warning("checkpoint | left alone, not counted toward --keep_checkpoints "
                        "(unreadable): %s", "; ".join(new))
        _WARNED.update(path for path, _ in unreadable)
    others = [path for path, _ in readable if path != written]
    for path in others[max(keep - 1, 0):]:
        _remove(path)
    # Leftovers of a writer or pruner killed mid-way: never valid. Safe to delete, as
    # the writer lock makes this process the directory's only writer.
    for name in os.listdir(directory):
        if name.startswith((_PARTIAL, _PRUNING)):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _remove(path: str):
    """Renames aside, then deletes: killed half-way, it leaves a dot-name that
    list_checkpoints never matches (cleaned by the next prune), not a half checkpoint."""
    aside = os.path.join(os.path.dirname(path), _PRUNING + os.path.basename(path))
    shutil.rmtree(aside, ignore_errors=True)  # a leftover of an earlier interrupted prune
    try:
        os.rename(path, aside)
    except OSError as err:
        return logging.warning("checkpoint | could not prune %s (%s); left in place", path, err)
    shutil.rmtree(aside, ignore_errors=True)


def load_latest(directory: str, config, variables, facts: dict | None = None):
    """(step, arrays for `variables`) of the newest loadable checkpoint, or None. A corrupt
    one is skipped with a warning naming it; one from another config, data or world size,
    or holding other variables (names, shapes), is refused with what differs (continuing
    it would silently train something else)."""
    names = state_names(variables)
    for step, path in list_checkpoints(directory):
        try:
            meta = read_meta(path)
            with np.load(os.path.join(path, "state.npz")) as data:
                arrays = [data[key] for key in stored_keys(meta)]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            logging.warning("checkpoint | %s is unreadable (%s); trying the previous one", path, err)
            continue
        _check_compatible(path, meta, config, len(names), facts)
        # Format 1 (by position, before the names) has its count and shapes alone.
        if not is_positional(meta):
            check_names(path, meta["names"], names)
        check_shapes(path, arrays, variables)
        return step, arrays
    return None


def _check_compatible(path, meta, config, num_variables, facts=None):
    stored, now = meta["fingerprint"], _plain(facts)
    diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {v!r}"
             for k, v in fingerprint(config).items() if stored.get(k) != v]
    # A fact the checkpoint lacks was not recorded then (an older version): accepted.
    diffs += [f"{k}: checkpoint {stored[k]!r}, now {v!r}" for k, v in now.items()
              if k != "world_size" and k in stored and stored[k] != v]
    # By name, check_names says which variable differs; by position, the count is all.
    if is_positional(meta) and meta["num_variables"] != num_variables:
        diffs.append(f"variables: checkpoint {meta['num_variables']}, now {num_variables}")
    if diffs:
        raise UsageError(f"--checkpoint_dir: {path} was made by a different run ({'; '.join(diffs)}); "
                         f"expected the same model, data and batch settings. Fix: use a new "
                         f"--checkpoint_dir, or restore the original flags")
    written = stored.get("world_size")
    if isinstance(written, int) and "world_size" in now and written != now["world_size"]:
        raise WorldSizeMismatch(path, written, now["world_size"])


class WorldSizeMismatch(UsageError):
    """The data position (step x global batch, the per-rank shards) and the linearly
    scaled learning rate depend on the world size: another one cannot continue exactly."""

    def __init__(self, path: str, written: int, now: int):
        self.step, self.written = int(_NAME.match(os.path.basename(path)).group(1)), written
        super().__init__(
            f"--checkpoint_dir: {path} was written by a {written}-rank run, this run has "
            f"{now} ranks; expected the same world size (the data position and the scaled "
            f"learning rate depend on it). Fix: relaunch with {written} rank"
            f"{'s' if written != 1 else ''}, or use a new "
            f"--checkpoint_dir (for a changing world size use --elastic)")


# What a refusal was, so ranks that never read the directory can say the same thing.
_FINE, _REFUSED, _FOREIGN, _WORLD = 0, 1, 2, 3


class Checkpointer:
    """Restore and save for the loop, with every verdict agreed by all ranks.

    Only the chief touches the directory (it need not be shared); the step to resume
    from, a refusal, or a failed write are decided on the chief and then shared
    through an allreduce, so no rank waits in a collective for a decision it missed."""

    def __init__(self, config, backend, variables, steps_per_epoch: int,
                 data_facts: dict | None = None, heartbeat=None):
        self.config, self.backend, self.variables = config, backend, variables
        self.heartbeat = heartbeat  # after each round of a write (rounds.py)
        train = config.train
        self.directory, self.keep = train.checkpoint_dir, train.keep_checkpoints
        self.every = train.checkpoint_interval(steps_per_epoch)
        self.facts = dict(data_facts or {}, world_size=backend.info.size)
        self._lock = None

    def _agree(self, values: list[float]) -> list[float]:
        from horovod_train.metrics import gather_rows
        return list(gather_rows(self.backend, values)[0])  # the chief's row

    def _hold_lock(self):
        if self._lock is None:
            self._lock = acquire_writer_lock(self.directory)

    def close(self):
        """Releases the writer lock (process exit releases it too)."""
        release_writer_lock(self._lock)
        self._lock = None

    def restore(self) -> int:
        """Loads the newest valid checkpoint on the chief, shares it; returns its step."""
        if not self.directory:
            return 0
        found, error, verdict = self._load_on_chief() if self.backend.info.is_chief \
            else (None, None, [0, _FINE, 0])
        step, kind, detail = (int(v) for v in self._agree(verdict))
        if kind != _FINE:
            raise error or self._refusal(kind, step, detail)
        if step:
            if found:
                for variable, value in zip(self.variables, found[1]):
                    variable.assign(value)
            # Same state everywhere: rank 0's restored values, explicitly.
            self.backend.broadcast_variables(self.variables)
            logging.info("checkpoint | resumed from step %d", step)
        return step

    def _load_on_chief(self):
        """(found, error, [step, kind, detail]) for _agree: the lock first, then the read."""
        try:
            self._hold_lock()
            found = load_latest(self.directory, self.config, self.variables, self.facts)
        except WorldSizeMismatch as err:
            return None, err, [err.step, _WORLD, err.written]
        except UsageError as err:
            return None, err, [0, _FOREIGN if isinstance(err, ForeignWriter) else _REFUSED, 0]
        return found, None, [found[0] if found else 0, _FINE, 0]

    def _path(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{step:09d}")

    def _refusal(self, kind: int, step: int, detail: int) -> UsageError:
        if kind == _WORLD:  # the chief's very words, rebuilt from what it shared
            return WorldSizeMismatch(self._path(step), detail, self.backend.info.size)
        if kind == _FOREIGN:
            return foreign_writer(self.directory, {}, "rank 0's message names it")
        return UsageError(f"--checkpoint_dir: the chief refused the checkpoint in "
                          f"{self.directory!r}; expected a compatible one. Fix: see "
                          f"rank 0's message")

    def maybe_save(self, step: int, last: bool = False):
        if not self.directory or not (last or (self.every and step % self.every == 0)):
            return
        def write():
            time.sleep(injected_delay(self.config.runtime.delays(), "checkpoint", 0))
            try:
                self._hold_lock()
                path = save(self.directory, step, self.variables, self.config, self.keep,
                            self.facts)
                logging.info("checkpoint | wrote %s", path)
            except UsageError as err:
                return err
            return None
        # The chief writes while every rank joins rounds (rounds.py): a write longer
        # than the watchdog's bound is not a stalled chief to the others. Imported here:
        # rounds needs TensorFlow, which this module's readers (tests, tools) do not.
        from horovod_train import rounds
        error = rounds.in_rounds(
            self.backend, write if self.backend.info.is_chief else None,
            rounds.round_seconds(self.config.runtime.collective_timeout_s),
            lambda *_: self.heartbeat and self.heartbeat())
        (failed,) = self._agree([1 if error else 0])
        if failed:
            raise error or UsageError("--checkpoint_dir: the chief could not write a checkpoint; "
                                      "expected a writable directory. Fix: see rank 0's message")
