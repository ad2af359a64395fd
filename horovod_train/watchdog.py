"""A bound on how long a rank waits for its peers.

A collective waits for every rank. Launchers end the job when a rank *dies* under
them (horovodrun and mpirun within about a second), but not when a rank is stalled
(stopped, swapping, wedged in I/O), nor when the ranks were started independently
(TF_CONFIG workers, srun without --kill-on-bad-exit). Then the survivors would wait
forever inside an allreduce. This thread ends the process instead once no collective
with the peers (a training step, a round of a phase without steps: rounds.py, or any
other that `where` tracks) has finished for the timeout, with a line that says which
rank stalled and where (message()) and how to resume, and
an exit code a supervisor can treat as "retry": 75 (EX_TEMPFAIL). A process alone has
no peer to wait for, and runs no watchdog (loop.py).

It is a thread, not a signal alarm, because the main thread is blocked inside a
C++ collective that does not return to Python to handle a signal.
"""
import contextlib
import os
import re
import threading
import time

from absl import logging

from horovod_train import console
from horovod_train.stacks import Whereabouts
from launch.redact import redact

EXIT_PEER_LOST = 75  # EX_TEMPFAIL: relaunching with the same flags resumes the run
# How long a rank that saw its peer vanish waits before exiting 75. The peer may have
# failed on its own (an exception, bad data: exit 1 or 2); horovodrun and mpirun end
# the job with the FIRST failing process's code, and that must be the peer's, or a
# supervisor following the exit-code contract retries a deterministic failure forever.
PEER_LOST_SETTLE_S = 3.0
# What a stalled rank needs after the bound to dump every rank's stacks and print the
# summary (stacks.report). A backend whose collectives have a timeout of their own (MWMS)
# sets it this much later, so the watchdog, which sees the live stacks, speaks first.
REPORT_MARGIN_S = PEER_LOST_SETTLE_S + 2.0
# Set once this process has begun to end itself here (its one stopped line said). The
# process ends once, so this is process-wide on purpose: a collective that times out in
# the main thread while the stacks are dumped (a loaded host can take longer than
# REPORT_MARGIN_S) must not print a second, different stopped line (test_local_phases).
ENDING = threading.Event()


class StepWatchdog:
    """Ends this process when no beat() arrives for `timeout_s` seconds while armed."""

    def __init__(self, timeout_s: float, rank: int, clock=time.monotonic, on_expire=None,
                 size: int = 0):
        self.timeout_s, self.rank, self.size, self._clock = timeout_s, rank, size, clock
        self._on_expire = on_expire or _exit_peer_lost
        # The collective this rank is in (stacks.py), and what runs before it exits on a
        # stall: every rank's stacks, and the chief's summary (loop.py sets it).
        self.where = _Collectives(self.alive)
        self.before_exit = None
        self._last_beat = self._last_poll = clock()
        self._own_gap_s = 0.0  # the longest this process stood still since the last beat
        self._last_step = None
        self._armed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        self._thread.start()
        return self

    def beat(self, step: int):
        """A step finished: the peers were there for it. Arms the watchdog."""
        with self._lock:
            self._last_beat, self._last_step, self._armed = self._clock(), step, True
            self._own_gap_s = 0.0

    def alive(self):
        """A collective of a phase without steps finished (rounds.py): the peers were
        there for it. Keeps the watchdog as it was (armed or not), with a new clock."""
        with self._lock:
            self._last_beat, self._own_gap_s = self._clock(), 0.0

    def polled(self, poll_s: float):
        """The watchdog thread woke from a wait of poll_s. A clock that moved much more
        than that means this process itself did not run in between (SIGSTOP, a paused
        host, swapping): the stall is this rank's, not a peer's."""
        with self._lock:
            now = self._clock()
            self._own_gap_s = max(self._own_gap_s, now - self._last_poll - poll_s)
            self._last_poll = now

    def disarm(self):
        """For phases that may legitimately take long without steps (final evaluation)."""
        with self._lock:
            self._armed = False

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def expired(self) -> bool:
        with self._lock:
            return self._armed and self._clock() - self._last_beat > self.timeout_s

    def message(self) -> str:
        """Which rank stalled and where: this one (its own clock jumped, or it was in no
        collective: its own work took the time), or the peer it waited for."""
        with self._lock:
            gap, where = self._own_gap_s, self.where.snapshot()
        if gap >= self.timeout_s / 2:
            cause = (f"this rank itself was stopped or stalled for {gap:.0f} s of that (its "
                     f"watchdog's own clock jumped: SIGSTOP, Ctrl-Z, a paused host or heavy "
                     f"swapping), so its peers have likely ended already; it ends too")
        elif where is None:
            cause = ("this rank itself was in no collective: its own work since then took "
                     "that long while its peers waited, so it ends instead")
        else:
            peer = f"rank {1 - self.rank}, its peer," if self.size == 2 else "a peer rank"
            cause = (f"this rank waited in {where['collective']} (step {where['step']}) and "
                     f"{peer} has died or stalled, so this rank ends instead of waiting forever")
        return (f"rank {self.rank}: no collective with the peers finished for "
                f"{self.timeout_s:g} s (--collective_timeout_s) after step {self._last_step}; "
                f"{cause}. Relaunch with the same flags to resume from the newest checkpoint "
                f"in --checkpoint_dir")

    def _watch(self):
        # Poll a few times per timeout: the bound is timeout_s plus one poll.
        poll = min(1.0, self.timeout_s / 4)
        with self._lock:
            self._last_poll = self._clock()
        while not self._stop.wait(poll):
            self.polled(poll)
            if self.expired():
                if self.before_exit is not None:
                    self.before_exit(self.message())
                self._on_expire(self.message())
                return


class _Collectives(Whereabouts):
    """The collective this rank is in (stacks.py), and each one that finishes a sign of
    life: the peers were there for it. Counting steps and rounds alone, the waits of the
    collectives between two steps (a metrics gather, the first weight check, traced on a
    loaded host, a checkpoint write's first round) added up past the bound though none
    was stalled (issue 55 item 5). One that raises is none."""

    def __init__(self, finished):
        super().__init__()
        self._finished = finished

    @contextlib.contextmanager
    def entering(self, name: str, step: int, nbytes: int = 0):
        with super().entering(name, step, nbytes):
            yield
        self._finished()


def _exit_peer_lost(message: str):
    exit_to_resume(message, "watchdog")


def exit_to_resume(message: str, label: str, settle_s: float = 0.0, then=None):
    """Ends this process with `message` and exit 75 (a relaunch resumes); then(message)
    after the line (the stacks). settle_s: a pause after both, so that every rank ending
    at once prints its own line before a launcher ends the job for the first one gone."""
    ENDING.set()
    logging.error("%s | %s", label, message)
    # Not through logging's filter: a --checkpoint_dir URL's credentials masked here.
    console.last_line(f"horovod_train: stopped: {message}")
    if then is not None:
        then(message)
    time.sleep(settle_s)
    # os._exit: the main thread may be stuck in a collective (or a write) and never unwind.
    os._exit(EXIT_PEER_LOST)


# TensorFlow error classes that mean "a peer went away" when raised by a collective:
# MWMS's health check and gRPC report Unavailable, its collective timeout
# DeadlineExceeded, Horovod's ops Unknown/Internal/Aborted with "Horovod" in the text,
# and collectives queued behind an aborted one Cancelled.
_PEER_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError")
_HOROVOD_ERRORS = ("UnknownError", "InternalError", "FailedPreconditionError",
                   "HorovodInternalError", "CancelledError")


def settle_before_peer_lost_exit(seconds: float = PEER_LOST_SETTLE_S):
    """Gives a failing peer's own exit code the time to reach the launcher first."""
    time.sleep(seconds)


def describe_peer_loss(err: BaseException, own_rank: int | None = None) -> str | None:
    """A one-line account of `err` if it says a peer rank was lost, else None.

    `own_rank` is left out of the "lost:" list: MWMS errors name this rank's own task
    too (its devices appear in the failed op's placement)."""
    kind = type(err).__name__
    text = str(getattr(err, "message", None) or err)
    lines = _message_lines(text)
    # Only the message itself decides: the node's Python stack TF appends names our
    # own files (horovod_train/...), which says nothing about who failed.
    # Gloo may report a dead peer from its transport alone ("gloo/transport/tcp/pair.cc:
    # Read error ...: Connection reset by peer"), naming neither Horovod nor a collective.
    collective = any("Horovod" in line or "ollective" in line or "/gloo/transport/" in line
                     for line in lines)
    if kind not in _PEER_ERRORS and not (kind in _HOROVOD_ERRORS and collective):
        return None
    detail = lines[0] if lines else kind
    tasks = _task_names(text, own_rank)
    lost = f" (lost: {', '.join(tasks)})" if tasks else ""
    return (f"a peer rank was lost{lost}: {kind}: {redact(detail)[:300]}. Relaunch with the same "
            f"flags to resume from the newest checkpoint in --checkpoint_dir")


# Lines of a TF error that are context, not the message: "Graph execution error:",
# "Detected at node X defined at (most recent call last):", the stack's "File ..."
# lines, and the "[[{{node X}}]]" trailer.
_CONTEXT_PREFIXES = ("Graph execution error", "Detected at node", "File ", "[[")


def _message_lines(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith(_CONTEXT_PREFIXES)]


_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def _task_names(text: str, own_rank: int | None = None) -> list[str]:
    """The tasks an error names, one spelling each, without this rank's own worker
    task (MWMS's errors name it too: the failed op ran on its devices)."""
    tasks = {(job, int(index)) for job, index in _TASK.findall(text)}
    tasks.discard(("worker", own_rank))
    return [f"/job:{job}/task:{index}" for job, index in sorted(tasks)]
