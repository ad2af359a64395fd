"""Stopping on SIGTERM without losing work.

Slurm, Kubernetes and mpirun send SIGTERM before they kill. On it, a rank only
*votes* to stop: the vote rides along the next step's gradient allreduce (one more
scalar in the same grouped call, no extra collective), so every rank learns at the
same step that someone asked, the chief writes a checkpoint there, and all ranks exit
with EXIT_STOPPED together. A rank that stopped on its own would leave its peers
waiting in the next collective.

The grace period bounds the wait: if no step boundary is reached in time (a peer is
stalled, a step is very long), the rank ends anyway, as a SIGKILL would have ended it.

A SIGTERM that comes after a peer on this host has ended is not a stop to vote on: the
launcher is ending the job because that peer is gone (mpirun and horovodrun do so when
a rank is killed, with their own code: 137). PeerEndedWatch then says so in one line,
naming the peer, and the rank exits 75 (a peer was lost; a relaunch resumes).
"""
import os
import signal
import socket
import sys
import threading

from absl import logging

from horovod_train import console, local_peers
from horovod_train.watchdog import EXIT_PEER_LOST

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

    def __init__(self, grace_s: float, rank: int, exit_fn=os._exit,
                 find_peers=local_peers.find):
        self.grace_s, self.rank, self._exit = grace_s, rank, exit_fn
        self._find_peers = find_peers
        self.requested = False
        self._previous = None
        self._timer = None
        self._watch = None

    def install(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            # Training starts once every rank has joined: all local peers run by now.
            self._watch = PeerEndedWatch(self.rank, self._find_peers(), self._exit).start()
        return self

    def uninstall(self):
        if self._timer is not None:
            self._timer.cancel()
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
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
        console.last_line(f"horovod_train: stopped: rank {self.rank}: SIGTERM received and no "
                          f"step boundary reached within {self.grace_s:g} s (--stop_grace_s); "
                          f"ending without a new checkpoint. Relaunch with the same flags to "
                          f"resume from the newest one")
        sys.stdout.flush()
        self._exit(EXIT_STOPPED)


class PeerEndedWatch:
    """On SIGTERM, if a peer on this host (local_peers) has ended, prints one line naming
    it and exits 75; otherwise leaves the SIGTERM to the stop vote.

    A thread, not the signal handler: Python runs handlers in the main thread between
    bytecodes, and a survivor is blocked in a C++ collective with its dead peer until
    the launcher's SIGKILL (mpirun's comes 1 s after its SIGTERM). Python's C-level
    handler writes the signal's number to the wakeup fd from whichever thread the kernel
    chose, so this thread wakes at once. Only the lowest surviving rank of the host
    speaks: one line, however many survive."""

    # A stop the ranks agreed on ends them all within moments of each other, so the
    # launcher's SIGTERM may reach a rank on its way out after a peer left with 143:
    # uninstall() within this time means this rank was leaving, and nothing is said.
    SETTLE_S = 0.2

    def __init__(self, rank: int, peers, exit_fn=os._exit, proc: str = "/proc"):
        self.rank, self.peers, self._exit, self._proc = rank, tuple(peers), exit_fn, proc
        self._stopped = threading.Event()
        self._sockets = None
        self._previous_fd = -1
        self._thread = None

    def start(self):
        if not self.peers:
            return self  # alone on this host, or no job identity: nothing to tell apart
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._sockets = (reader, writer)
        self._previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._run, name="sigterm-peers", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()
        if self._sockets is None:
            return
        signal.set_wakeup_fd(self._previous_fd)
        reader, writer = self._sockets
        try:
            writer.send(b"\0")  # wakes the thread, which sees the stop
        except OSError:
            pass
        self._thread.join(timeout=2)
        reader.close()
        writer.close()
        self._sockets = None

    def _run(self):
        reader = self._sockets[0]
        while not self._stopped.is_set():
            try:
                data = reader.recv(64)  # a signal's number, or stop()'s wake-up
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data and not self._stopped.is_set():
                self._on_sigterm()

    def _on_sigterm(self):
        gone = local_peers.ended(self.peers, self._proc)
        if not gone or self._stopped.wait(self.SETTLE_S):
            return
        if not any(peer.rank < self.rank for peer in self.peers if peer not in gone):
            console.last_line(f"horovod_train: stopped: {peer_lost_message(self.rank, gone)}")
        self._exit(EXIT_PEER_LOST)


def peer_lost_message(rank: int, gone) -> str:
    names = ", ".join(f"rank {peer.rank} (pid {peer.pid})" for peer in gone)
    return (f"rank {rank}: SIGTERM received after {names} on this host had ended: a peer "
            f"was lost, so the job ends (exit 75). Relaunch with the same flags to resume "
            f"from the newest checkpoint in --checkpoint_dir (if the lost rank printed an "
            f"error of its own, fix that first)")
