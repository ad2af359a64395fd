"""Checkpoints: the chief writes, and commits; every rank restores, then rank 0's copy
is broadcast.

A checkpoint is a directory `ckpt-<step>` holding `state.npz` (every model, optimizer
and loss-scale variable, each under its name), `meta.json` (step, format, the names
in order, the config that shapes the state and the data order) and `COMMIT`, a marker
written last; checkpoint_format.py says how arrays are named and checked, and
checkpoint_commit.py when a directory counts: only a committed one is loaded or counted,
so a crash mid-write leaves the previous checkpoint intact and no half-written one that
looks valid, on a local disk (written aside, then renamed) and on object stores alike
(gs://, s3://: through fs.py). The input order is a pure function of (seed, epoch), so
the data position is (epoch, examples into it), recorded in meta.json with the learning
rate's multiplier and warmup: a relaunch on another number of ranks continues from them
(resume.py), with the global batch the checkpoint recorded.

Only checkpoints this code can read are counted toward --keep_checkpoints or deleted;
a removal cut short never leaves half a checkpoint that counts. One job writes a
directory: the chief holds the writer lock (writer_lock.py: an flock on local disks, a
lease elsewhere) for the whole run, and a second job is refused naming the first.
"""
import errno
import json
import os
import time
import zipfile

import numpy as np
from absl import logging

from horovod_train import checkpoint_commit as commit, checkpoint_meta
from horovod_train.checkpoint_fingerprint import differences, fingerprint
from horovod_train import fs
from horovod_train.checkpoint_format import (FORMAT, check_format, check_names, check_shapes,
                                             is_positional, state_names, stored_keys,
                                             write_arrays)
from horovod_train.config import injected_delay
from horovod_train.errors import UsageError
from horovod_train.writer_lock import (ForeignWriter, acquire_writer_lock, foreign_writer,
                                       release_writer_lock)

def training_state(model, optimizer, loss_scale, shards=None) -> list:
    """Every variable a resumed run needs, in a fixed order. With the optimizer state
    sharded (optimizer_shards.py), its variables as an unsharded run names them, each
    slot whole (gathered before a save, cut into the shards after a restore).

    model.variables, not model.weights: it also holds each dropout layer's seed
    generator state, without which a resumed run draws other dropout masks than the
    uninterrupted one and the two drift apart. Each is stored under its name:
    checkpoint_format.state_names."""
    optimizer_state = optimizer.variables if shards is None else shards.checkpoint_state()
    return (list(model.variables) + list(optimizer_state)
            + [loss_scale.scale, loss_scale.good_steps])


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of every directory named like a checkpoint, newest first, committed
    or not: commit.inspect says which count."""
    if not fs.isdir(directory):
        return []
    found = [(step, os.path.join(directory, name)) for name in fs.listdir(directory)
             if (step := commit.step_of(name)) is not None]
    return sorted(found, reverse=True)


def read_meta(path: str) -> dict:
    """A checkpoint's meta.json; ValueError naming the defect when it is not the object
    save() writes (so callers skip it like any other unreadable checkpoint)."""
    meta = json.loads(fs.read_bytes(os.path.join(path, commit.META)))
    if not isinstance(meta, dict):
        raise ValueError(f"meta.json holds a JSON {type(meta).__name__}, not an object")
    for key, kind in (("step", int), ("num_variables", int), ("fingerprint", dict)):
        if type(meta.get(key)) is not kind:  # `is`, so a JSON true is no count
            raise ValueError(f"meta.json field {key!r} is {meta.get(key)!r}, not a JSON "
                             f"{'object' if kind is dict else 'integer'}")
    check_format(meta)
    return meta


def _unreadable(path: str, verdict: commit.Verdict | None = None) -> str | None:
    """Why this checkpoint must not be counted or tried, or None (uncommitted: unreadable).
    Cheap: the arrays are not read. `verdict`: commit.inspect's, when the caller has it."""
    why_not = (verdict or commit.inspect(path)).why_not
    if why_not:
        return why_not
    try:
        read_meta(path)
    except (OSError, ValueError) as err:
        return str(err)
    return None if fs.isfile(os.path.join(path, commit.STATE)) else "no state.npz"


def save(directory: str, step: int, variables, config, keep: int, facts: dict | None = None,
         record: dict | None = None):
    """Chief only. Raises UsageError (after cleaning up) when the disk refuses. `record`:
    more of the run's state for meta.json (the learning-rate schedule, the position)."""
    names = state_names(variables)  # before any write: a refusal leaves nothing behind
    # num_variables stays: older versions check it, then skip this checkpoint as
    # unreadable (no v00000) rather than misread it.
    meta = {"format": FORMAT, "step": step, "num_variables": len(names),
            "names": names, "fingerprint": fingerprint(config, facts), **(record or {})}
    try:
        _out_of_the_way(os.path.join(directory, commit.name(step)))
        final = commit.write(directory, step, meta, lambda f: write_arrays(f, names, variables))
    except OSError as err:
        raise _write_error(directory, err) from None
    _prune(directory, keep, final)
    return final


def _out_of_the_way(path: str):
    """A directory at the step about to be written that the prune leaves alone (unreadable
    and not provably what this code left cut short: another version's, a person's) is
    set aside by name, never replaced."""
    if not fs.isdir(path):
        return
    verdict = commit.inspect(path)
    reason = None if verdict.leftover else _unreadable(path, verdict)
    if reason:
        aside = commit.set_aside(path)
        logging.warning("checkpoint | %s was left alone (%s); set aside as %s, so that this "
                        "save of the same step does not replace it", path, reason, aside)


def _write_error(directory, err) -> UsageError:
    reason = err.strerror or str(err)  # a URL's error has TensorFlow's message, no strerror
    if err.errno == errno.ENOENT:  # what we were writing is gone: someone else deleted it
        return UsageError(f"--checkpoint_dir: the checkpoint being written in {directory!r} "
                          f"vanished mid-write ({err.filename}: {reason}); expected this "
                          f"job to be the only one writing there. Fix: give each job its own "
                          f"--checkpoint_dir, and clean it only while no job runs")
    return UsageError(f"--checkpoint_dir: cannot write a checkpoint in {directory!r} "
                      f"({reason}); expected a writable directory with free space. "
                      f"Fix: free space or point --checkpoint_dir elsewhere; earlier "
                      f"checkpoints there are untouched")


_WARNED = set()  # unreadable dirs already named: one warning each, not one per save


def _prune(directory: str, keep: int, written: str):
    """Keeps `written` and the newest keep-1 other readable checkpoints; the rest go.

    Unreadable and uncommitted ones are neither counted nor deleted: they may be another
    version's, or a user's, and counting them would delete the good ones instead. The
    exception: what a write or removal of this code left cut short (commit.inspect's
    leftover), which is deleted, as the writer lock makes this process the only writer."""
    readable, unreadable = [], []
    for _, path in list_checkpoints(directory):
        verdict = commit.inspect(path)
        if verdict.leftover and path != written:
            _remove(path)
            continue
        reason = _unreadable(path, verdict)
        (unreadable if reason else readable).append((path, reason))
    new = [f"{path} ({reason})" for path, reason in unreadable if path not in _WARNED]
    if new:
        logging.warning("checkpoint | left alone, not counted toward --keep_checkpoints "
                        "(unreadable): %s", "; ".join(new))
        _WARNED.update(path for path, _ in unreadable)
    others = [path for path, _ in readable if path != written]
    for path in others[max(keep - 1, 0):]:
        _remove(path)
    commit.clean_aside(directory)


def _remove(path: str):
    try:
        commit.remove(path)
    except OSError as err:
        logging.warning("checkpoint | could not prune %s (%s); left in place", path, err)


def load_latest(directory: str, config, variables, facts: dict | None = None):
    """(step, arrays for `variables`) of the newest loadable checkpoint, or None. An
    uncommitted or corrupt one is skipped with a warning naming it; one from another
    config, data or world size, or holding other variables (names, shapes), is refused
    with what differs (continuing it would silently train something else)."""
    names = state_names(variables)
    for step, path in list_checkpoints(directory):
        try:
            why = commit.inspect(path).why_not
            if why:
                raise ValueError(why)
            meta = read_meta(path)
        except (OSError, ValueError) as err:
            logging.warning("checkpoint | %s is unreadable (%s); trying the previous one", path, err)
            continue
        # The record first: a refusal never waits on reading the state (GBs). Only the
        # chief reads the directory, so it is the one to name a field an older version lacks.
        checkpoint_meta.check(meta, path, chief=True)  # out of range: refused, not skipped
        _check_compatible(path, meta, config, len(names), facts)
        # Format 1 (by position, before the names) has its count and shapes alone.
        if not is_positional(meta):
            check_names(path, meta["names"], names)
        try:
            with fs.reading(os.path.join(path, commit.STATE)) as f, np.load(f) as data:
                arrays = [data[key] for key in stored_keys(meta)]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            logging.warning("checkpoint | %s is unreadable (%s); trying the previous one", path, err)
            continue
        check_shapes(path, arrays, variables)
        return step, arrays
    return None


def recorded_position(path: str) -> tuple[int, int, int, bool] | None:
    """(epoch, examples into it, the writer's global batch or 0, whether any launch
    changed the global batch) as the checkpoint at `path` recorded them; None for older
    checkpoints, whose step says where at the world size that wrote them."""
    try:
        meta = read_meta(path)
    except (OSError, ValueError):  # read a moment ago; unreadable now: as if unrecorded
        return None
    position, keys = meta.get("position"), ("epoch", "epoch_examples")
    if isinstance(position, dict) and all(type(position.get(k)) is int and position[k] >= 0
                                          for k in keys):
        return (*(position[k] for k in keys), checkpoint_meta.global_batch(meta) or 0,
                meta.get("global_batch_changed") is True)
    return None


def _check_compatible(path, meta, config, num_variables, facts=None):
    diffs = differences(meta["fingerprint"], config, facts)
    # By name, check_names says which variable differs; by position, the count is all.
    if is_positional(meta) and meta["num_variables"] != num_variables:
        diffs.append(f"variables: checkpoint {meta['num_variables']}, now {num_variables}")
    if diffs:
        raise UsageError(f"--checkpoint_dir: {path} was made by a different run ({'; '.join(diffs)}); "
                         f"expected the same model, data and batch settings. Fix: use a new "
                         f"--checkpoint_dir, or restore the original flags")


def newest_meta(directory: str) -> dict | None:
    """meta.json of the checkpoint a restore would try first: the newest readable one,
    with the path it was read from (checkpoint_meta.READ_FROM) for the ranks it is
    shared with."""
    for _, path in list_checkpoints(directory):
        try:
            if _unreadable(path) is None:
                return dict(read_meta(path), **{checkpoint_meta.READ_FROM: path})
        except (OSError, ValueError):  # changed since: the restore will say what it finds
            continue
    return None


# What a refusal was, so ranks that never read the directory can say the same thing.
_FINE, _REFUSED, _FOREIGN = 0, 1, 2


class Checkpointer:
    """Restore and save for the loop, with every verdict agreed by all ranks.

    Only the chief touches the directory (it need not be shared); the step to resume
    from, a refusal, or a failed write are decided on the chief and then shared
    through an allreduce, so no rank waits in a collective for a decision it missed."""

    def __init__(self, config, backend, variables, steps_per_epoch: int,
                 data_facts: dict | None = None, heartbeat=None, schedule=None, change=None,
                 shards=None):
        self.config, self.backend, self.variables = config, backend, variables
        # optimizer_shards.OptimizerShards, or None: its slots are saved whole (gathered
        # on every rank before the chief writes) and cut back into shards after a restore.
        self.shards = shards
        self.heartbeat = heartbeat  # after each round of a write (rounds.py)
        train = config.train
        self.directory, self.keep = train.checkpoint_dir, train.keep_checkpoints
        self.every = train.checkpoint_interval(steps_per_epoch)
        self.facts = dict(data_facts or {}, world_size=backend.info.size)
        # The learning rate's multiplier and warmup steps (schedules.WarmupScaledRate), so
        # a resume on another world size continues the same schedule (resume.py).
        self.schedule = schedule
        self.change = change  # resume.Resumption.change: what this launch changed, if anything
        self.resumed = None  # after a restore: where from, for the summary
        # After a restore, as its record says (every rank): the writer's global batch (0:
        # not recorded), and whether any launch of this run changed the global batch (the
        # record's flag, or this launch against it), recorded in every checkpoint from then on.
        self.written_global_batch, self.global_batch_changed = 0, False
        self._lock = None

    def _agree(self, values: list[float]) -> list[float]:
        from horovod_train.metrics import gather_rows
        return list(gather_rows(self.backend, values)[0])  # the chief's row

    def _hold_lock(self):
        # Each call (the restore, every save) also confirms a lease is still this job's.
        self._lock = acquire_writer_lock(self.directory)

    def close(self):
        """Releases the writer lock (process exit releases it too)."""
        release_writer_lock(self._lock)
        self._lock = None

    def restore(self) -> tuple[int, tuple | None]:
        """Loads the newest valid checkpoint on the chief, shares it; returns its step
        and its data position (epoch, examples into it), None when not recorded."""
        if not self.directory:
            return 0, None
        found, error, verdict = self._load_on_chief() if self.backend.info.is_chief \
            else (None, None, [0, _FINE, 0, 0, 0, 0])
        step, kind, epoch, examples, batch, changed = (int(v) for v in self._agree(verdict))
        if kind != _FINE:
            raise error or self._refusal(kind)
        now = self.facts["world_size"] * self.config.data.batch_size * \
            self.config.speed.grad_accum_steps
        self.written_global_batch = batch
        self.global_batch_changed = bool(changed) or bool(step and batch and batch != now)
        if step:
            if found:
                for variable, value in zip(self.variables, found[1]):
                    variable.assign(value)
            # Same state everywhere: rank 0's restored values, explicitly.
            if self.shards is None:
                self.backend.broadcast_variables(self.variables)
            else:
                self.backend.broadcast_variables(self.shards.broadcastable(self.variables))
                self.shards.scatter_restored()
            logging.info("checkpoint | resumed from step %d%s", step,
                         f" {self.change}" if self.change else "")
            self.resumed = {"step": step, "change": self.change,
                            "position": [epoch, examples] if epoch >= 0 else None}
        return step, ((epoch, examples) if step and epoch >= 0 else None)

    def _load_on_chief(self):
        """(found, error, [step, kind, detail]) for _agree: the lock first, then the read."""
        try:
            self._hold_lock()
            found = load_latest(self.directory, self.config, self.variables, self.facts)
        except UsageError as err:
            kind = _FOREIGN if isinstance(err, ForeignWriter) else _REFUSED
            return None, err, [0, kind, 0, 0, 0, 0]
        if not found:
            return None, None, [0, _FINE, -1, 0, 0, 0]
        recorded = recorded_position(self._path(found[0])) or (-1, 0, 0, False)  # -1: none
        return found, None, [found[0], _FINE, *recorded[:3], int(recorded[3])]

    def _path(self, step: int) -> str:
        return os.path.join(self.directory, commit.name(step))

    def _refusal(self, kind: int) -> UsageError:
        if kind == _FOREIGN:
            return foreign_writer(self.directory, {}, "rank 0's message names it")
        return UsageError(f"--checkpoint_dir: the chief refused the checkpoint in "
                          f"{self.directory!r}; expected a compatible one. Fix: see "
                          f"rank 0's message")

    def maybe_save(self, step: int, last: bool = False, position: tuple | None = None):
        """Saves at the cadence (or `last`); `position`: (epoch, examples into it, the
        epoch's layouts as data/layouts.py records them)."""
        if not self.directory or not (last or (self.every and step % self.every == 0)):
            return
        record = {"lr_schedule": self.schedule} if self.schedule else {}
        record["global_batch_changed"] = self.global_batch_changed
        if position is not None:
            epoch, examples, layouts = position
            record["position"] = {"epoch": int(epoch), "epoch_examples": int(examples),
                                  "layouts": list(layouts)}
        if self.shards is not None:
            self.shards.gather_state()  # a collective: every rank, before the chief writes

        def write():
            time.sleep(injected_delay(self.config.runtime.delays(), "checkpoint", 0))
            try:
                self._hold_lock()
                path = save(self.directory, step, self.variables, self.config, self.keep,
                            self.facts, record)
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
        if self.shards is not None:
            self.shards.release_state()
        (failed,) = self._agree([1 if error else 0])
        if failed:
            raise error or UsageError("--checkpoint_dir: the chief could not write a checkpoint; "
                                      "expected a writable directory. Fix: see rank 0's message")
