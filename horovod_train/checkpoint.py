"""Checkpoints: the chief writes, atomically; every rank restores, then rank 0's copy
is broadcast.

A checkpoint is a directory `ckpt-<step>` holding `state.npz` (every model, optimizer
and loss-scale variable, in a fixed order) and `meta.json` (step, the config that
shapes the state and the data order). It is written under a temporary name and
renamed when complete, so a crash mid-write leaves the previous checkpoint intact and
no half-written one that looks valid. The data position needs no saving: the input
order is a pure function of (seed, epoch), so the step count says where to resume.
"""
import dataclasses
import json
import os
import re
import shutil
import tempfile
import zipfile

import numpy as np
from absl import logging

from horovod_train.errors import UsageError

_NAME = re.compile(r"^ckpt-(\d{9})$")
# Config fields that change the shape of the state or the data order: a checkpoint made
# with other values cannot be continued exactly.
_MUST_MATCH = ("model", "data.dataset", "data.batch_size", "runtime.seed",
               "speed.grad_accum_steps", "speed.precision", "optim.optimizer")


def _field(config_dict, dotted):
    value = config_dict
    for part in dotted.split("."):
        value = value[part]
    return value


def fingerprint(config) -> dict:
    as_dict = dataclasses.asdict(config)
    return {name: _field(as_dict, name) for name in _MUST_MATCH}


def training_state(model, optimizer, loss_scale) -> list:
    """Every variable a resumed run needs, in a fixed order.

    model.variables, not model.weights: it also holds each dropout layer's seed
    generator state, without which a resumed run draws other dropout masks than the
    uninterrupted one and the two drift apart."""
    return (list(model.variables) + list(optimizer.variables)
            + [loss_scale.scale, loss_scale.good_steps])


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of complete checkpoints, newest first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), os.path.join(directory, name))
             for name in os.listdir(directory) if (m := _NAME.match(name))]
    return sorted(found, reverse=True)


def save(directory: str, step: int, variables, config, keep: int):
    """Chief only. Raises UsageError (after cleaning up) when the disk refuses."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"ckpt-{step:09d}")
    try:
        tmp = tempfile.mkdtemp(prefix=".partial-ckpt-", dir=directory)
    except OSError as err:
        raise _write_error(directory, err) from None
    try:
        arrays = {f"v{i:05d}": np.asarray(v) for i, v in enumerate(variables)}
        with open(os.path.join(tmp, "state.npz"), "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({"step": step, "num_variables": len(arrays),
                       "fingerprint": fingerprint(config)}, f, indent=2)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)  # the commit point
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(directory, err) from None
    _prune(directory, keep)
    return final


def _write_error(directory, err) -> UsageError:
    return UsageError(f"--checkpoint_dir: cannot write a checkpoint in {directory!r} "
                      f"({err.strerror}); expected a writable directory with free space. "
                      f"Fix: free space or point --checkpoint_dir elsewhere; earlier "
                      f"checkpoints there are untouched")


def _prune(directory: str, keep: int):
    for _, path in list_checkpoints(directory)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    # Leftovers of writers killed mid-write (the chief is the only writer, and it has
    # just finished its own): never valid, so never kept.
    for name in os.listdir(directory):
        if name.startswith(".partial-ckpt-"):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def load_latest(directory: str, config, num_variables: int):
    """(step, arrays) of the newest loadable checkpoint, or None.

    A corrupt one is skipped with a warning naming it; one from another config is
    refused with what differs (continuing it would silently train something else)."""
    for step, path in list_checkpoints(directory):
        try:
            with open(os.path.join(path, "meta.json")) as f:
                meta = json.load(f)
            with np.load(os.path.join(path, "state.npz")) as data:
                arrays = [data[f"v{i:05d}"] for i in range(meta["num_variables"])]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            logging.warning("checkpoint | %s is unreadable (%s); trying the previous one", path, err)
            continue
        _check_compatible(path, meta, config, num_variables)
        return step, arrays
    return None


def _check_compatible(path, meta, config, num_variables):
    want = fingerprint(config)
    diffs = [f"{k}: checkpoint {meta['fingerprint'].get(k)!r}, now {v!r}"
             for k, v in want.items() if meta["fingerprint"].get(k) != v]
    if meta["num_variables"] != num_variables:
        diffs.append(f"variables: checkpoint {meta['num_variables']}, now {num_variables}")
    if diffs:
        raise UsageError(f"--checkpoint_dir: {path} was made by a different run ({'; '.join(diffs)}); "
                         f"expected the same model, data and batch settings. Fix: use a new "
                         f"--checkpoint_dir, or restore the original flags")


class Checkpointer:
    """Restore and save for the loop, with every verdict agreed by all ranks.

    Only the chief touches the directory (it need not be shared); the step to resume
    from, a refusal, or a failed write are decided on the chief and then shared
    through an allreduce, so no rank waits in a collective for a decision it missed."""

    def __init__(self, config, backend, variables, steps_per_epoch: int):
        self.config, self.backend, self.variables = config, backend, variables
        train = config.train
        self.directory, self.keep = train.checkpoint_dir, train.keep_checkpoints
        self.every = train.checkpoint_interval(steps_per_epoch)

    def _agree(self, values: list[float]) -> list[float]:
        from horovod_train.metrics import gather_rows
        return list(gather_rows(self.backend, values)[0])  # the chief's row

    def restore(self) -> int:
        """Loads the newest valid checkpoint on the chief, shares it; returns its step."""
        if not self.directory:
            return 0
        chief = self.backend.info.is_chief
        found, error = None, None
        if chief:
            try:
                found = load_latest(self.directory, self.config, len(self.variables))
            except UsageError as err:
                error = err
        step, failed = self._agree([found[0] if found else 0, 1 if error else 0])
        if failed:
            raise error or UsageError(f"--checkpoint_dir: the chief refused the checkpoint in "
                                      f"{self.directory!r}; expected a compatible one. Fix: see "
                                      f"rank 0's message")
        if step:
            if chief:
                for variable, value in zip(self.variables, found[1]):
                    variable.assign(value)
            # Same state everywhere: rank 0's restored values, explicitly.
            self.backend.broadcast_variables(self.variables)
            logging.info("checkpoint | resumed from step %d", int(step))
        return int(step)

    def maybe_save(self, step: int, last: bool = False):
        if not self.directory or not (last or (self.every and step % self.every == 0)):
            return
        error = None
        if self.backend.info.is_chief:
            try:
                path = save(self.directory, step, self.variables, self.config, self.keep)
                logging.info("checkpoint | wrote %s", path)
            except UsageError as err:
                error = err
        (failed,) = self._agree([1 if error else 0])
        if failed:
            raise error or UsageError("--checkpoint_dir: the chief could not write a checkpoint; "
                                      "expected a writable directory. Fix: see rank 0's message")
