"""A bound on the chief's checkpoint write (issue 55 item 3).

The write runs in rounds (rounds.py) so the ranks' watchdogs see a live job while the
chief writes; without a bound of its own, a write that never ends (a stuck network
mount, an object store that stopped answering) would keep every rank alive forever,
in silence. So each round of a write comes here on every rank: it feeds the watchdog,
prints a line now and then while the write runs long (as a long evaluation does), and
past the limit ends every rank with one line naming the write and its path, exit 75:
the write never committed, so the previous checkpoint is intact and a relaunch resumes
from it.

Every rank decides from the number of rounds it has joined, not from its own clock:
each round is one collective that every rank joins, so all ranks decide at the same
round and none is left waiting in a collective for a peer that already exited.
"""
import math
import os

import numpy as np
from absl import logging

from horovod_train import watchdog
from horovod_train.checkpoint_commit import name as checkpoint_name

# A conservative rate to any storage a run may write to (a busy NFS mount, an object
# store far away): a checkpoint of B bytes may take B / this before it counts as stuck.
SLOWEST_BYTES_PER_S = 10e6
PROGRESS_EVERY_S = 60.0  # as a long evaluation's (evaluation.py)


def write_limit_s(floor_s: float, state_bytes: int) -> float:
    """The one formula: seconds a write of `state_bytes` may take (--checkpoint_timeout_s
    at least)."""
    return max(floor_s, state_bytes / SLOWEST_BYTES_PER_S)


def state_bytes(variables) -> int:
    """The checkpoint's size: every variable whole, as the chief writes it (sharded
    optimizer slots count whole: optimizer_shards.GatheredSlot, float32)."""
    total = 0
    for v in variables:
        dtype = getattr(v, "dtype", "float32")
        size = getattr(dtype, "size", None) or np.dtype(str(dtype)).itemsize
        total += math.prod(int(d) for d in v.shape) * size
    return total


class WriteBound:
    """Called after each round of a checkpoint write, on every rank (Checkpointer's
    heartbeat). `step_of()` is the step being saved: a new step starts a new write."""

    def __init__(self, *, limit_s: float, round_s: float, rank: int, directory: str | None,
                 step_of, alive, progress_every_s: float = PROGRESS_EVERY_S, on_expire=None):
        self.limit_s, self.round_s, self.rank, self.directory = limit_s, round_s, rank, directory
        self._step_of, self._alive, self._every = step_of, alive, progress_every_s
        self._on_expire = on_expire or self._exit_to_resume
        self.after_line = None  # every rank's stacks (loop.py sets it with --run_dir)
        self._step, self._rounds, self._next_line = None, 0, progress_every_s

    def __call__(self, *_):
        self._alive()
        step = self._step_of()
        if step != self._step:
            self._step, self._rounds, self._next_line = step, 0, self._every
        self._rounds += 1
        # At least this long: each round waits round_s on the chief unless its write ended.
        elapsed = self._rounds * self.round_s
        if elapsed > self.limit_s:
            self._on_expire(self.message(elapsed))
        elif elapsed >= self._next_line:
            self._next_line = elapsed + self._every
            logging.info("checkpoint | still writing %s after %.0f s (ended at %.0f s: "
                         "--checkpoint_timeout_s)", self.path(), elapsed, self.limit_s)

    def path(self) -> str:
        return os.path.join(self.directory or "", checkpoint_name(self._step or 0))

    def message(self, elapsed: float) -> str:
        return (f"rank {self.rank}: the chief's checkpoint write of step {self._step} to "
                f"{self.path()} has not ended after {elapsed:.0f} s (limit {self.limit_s:.0f} s: "
                f"--checkpoint_timeout_s, or the checkpoint's size at "
                f"{SLOWEST_BYTES_PER_S / 1e6:g} MB/s if longer); the storage is stuck or far "
                f"too slow, so every rank ends. A write cut short never counts: the "
                f"checkpoints committed before it are intact. Fix: check the storage, then "
                f"relaunch with the same flags to resume from the newest committed checkpoint "
                f"in --checkpoint_dir")

    def _exit_to_resume(self, message: str):
        # The line first: with --run_dir a non-chief's stacks report waits for the chief's.
        watchdog.exit_to_resume(message, "checkpoint", settle_s=1.0, then=self.after_line)
