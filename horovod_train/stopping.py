"""Stopping on SIGTERM without losing work.

Slurm, Kubernetes and mpirun send SIGTERM before they kill. On it, a rank only
*votes* to stop: the vote rides along the next step's gradient allreduce (one more
scalar in the same grouped call, no extra collective), so every rank learns at the
same step that someone asked, the chief writes a checkpoint there, and all ranks exit
with EXIT_STOPPED together. A rank that stopped on its own would leave its peers
waiting in the next collective.

The grace period bounds the wait: if no step boundary is reached in time (a peer is
stalled, a step is very long), the rank ends anyway, as a SIGKILL would have ended it.
"""
import os
import signal
import sys
import threading

from absl import logging

# 128 + SIGTERM, what a shell reports for a process ended by SIGTERM; ours means "stopped
# at a step boundary after writing a checkpoint (when --checkpoint_dir is set): relaunch
# with the same flags to resume". Distinct from 75 (a peer was lost) on purpose.
EXIT_STOPPED = 128 + signal.SIGTERM


class StopRequested(Exception):
    """Every rank agreed to stop at `step` on a SIGTERM."""

    def __init__(self, step: int, saved: bool):
        self.step, self.saved = step, saved
        where = ("after writing a checkpoint there" if saved
                 else "without a checkpoint (no --checkpoint_dir)")
        super().__init__(f"stopped on SIGTERM at step {step}, {where}; relaunch with the same "
                         f"flags to resume")


class SigtermVote:
    """Turns SIGTERM into this rank's stop vote; bounds the time to act on it.

    Install it in the main thread (Python delivers signals there); uninstall restores
    the previous handler."""

    def __init__(self, grace_s: float, rank: int, exit_fn=os._exit):
        self.grace_s, self.rank, self._exit = grace_s, rank, exit_fn
        self.requested = False
        self._previous = None
        self._timer = None

    def install(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def uninstall(self):
        if self._timer is not None:
            self._timer.cancel()
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, _signum, _frame):
        if self.requested:
            return  # a second SIGTERM changes nothing: the grace timer already runs
        self.requested = True
        logging.warning("stop | rank %d: SIGTERM received; stopping at the next step boundary "
                        "(within %g s, --stop_grace_s)", self.rank, self.grace_s)
        self._timer = threading.Timer(self.grace_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self):
        print(f"horovod_train: stopped: rank {self.rank}: SIGTERM received and no step boundary "
              f"reached within {self.grace_s:g} s (--stop_grace_s); ending without a new "
              f"checkpoint. Relaunch with the same flags to resume from the newest one",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        self._exit(EXIT_STOPPED)

