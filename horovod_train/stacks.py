"""Where a stuck job is stuck: every rank's Python stack, and the collective it waits in.

Each rank of a run with --run_dir keeps, in RUN_DIR/stacks/:
  rank<R>.json   its pid, host and main thread, written at start (what `python -m launch
                 stacks` reads to find the ranks);
  rank<R>.txt    its Python stacks, all threads, appended at every dump;
  rank<R>.where.json   at every dump: the collective it was in (name, step, bytes).
A dump is faulthandler's, from a thread of ours while the main thread waits inside a
C++ collective (which releases the interpreter). It happens when this rank's watchdog
fires, when a collective fails because a peer was lost, and on request: `python -m launch
stacks --run_dir D` writes D/stacks/REQUEST, which each rank's dump thread answers
within POLL_S, and the job runs on. STACK_SIGNAL (SIGUSR2, `kill -USR2 PID`) appends the
stacks too, from faulthandler's own C handler: that works even when no Python thread
can run, but says nothing of the collective.

The chief then prints one summary: per rank, the innermost frame of the main thread
in our code or the user's (not TensorFlow's or Python's), the collective it waits in,
and the ranks that wrote nothing (gone: killed, or on a host that does not share
the run dir). faulthandler sees Python frames only: native frames (TensorFlow's C++,
Horovod's background thread) need py-spy (`py-spy dump --native --pid P`), which
`launch stacks --native` runs where it is installed.
"""
import contextlib
import dataclasses
import faulthandler
import json
import os
import signal
import socket
import threading
import time

from launch.stacks import DIR_NAME, REQUEST, summary, wait_for_dumps

STACK_SIGNAL = signal.SIGUSR2
POLL_S = 0.5  # how often a rank looks for a request: a stat, nothing more


class Whereabouts:
    """The collective this rank is in, if any: set around every call that waits for the
    peers (a step's allreduce, a metrics gather, a round), read when stacks are dumped."""

    def __init__(self):
        self._lock = threading.Lock()
        self._now = None
        self.failed = None  # the collective an exception last left (a peer lost)

    @contextlib.contextmanager
    def entering(self, name: str, step: int, nbytes: int = 0):
        with self._lock:
            before, self._now = self._now, {"collective": name, "step": step,
                                             "bytes": int(nbytes), "since": time.time()}
        try:
            yield
        except BaseException:
            self.failed = self.failed or dict(self._now)  # the innermost one
            raise
        finally:
            with self._lock:
                self._now = before

    def snapshot(self) -> dict | None:
        with self._lock:
            return dict(self._now) if self._now else None


@dataclasses.dataclass
class StackDump:
    """This rank's stack files under `directory` (RUN_DIR/stacks)."""
    directory: str
    rank: int
    where: Whereabouts = dataclasses.field(default_factory=Whereabouts)
    _file: object = None
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def path(self, suffix: str, rank: int | None = None) -> str:
        return os.path.join(self.directory, f"rank{self.rank if rank is None else rank}{suffix}")

    def install(self) -> "StackDump":
        """Opens the stack file and answers STACK_SIGNAL with a dump (not at import:
        called once the rank is known)."""
        os.makedirs(self.directory, exist_ok=True)
        for stale in (".txt", ".where.json"):  # a relaunch's files start empty
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(stale))
        self._file = open(self.path(".txt"), "a", buffering=1)
        faulthandler.register(STACK_SIGNAL, file=self._file, all_threads=True, chain=False)
        _write_json(self.path(".json"), {
            "pid": os.getpid(), "host": socket.gethostname(),
            "slurm_node": os.environ.get("SLURMD_NODENAME"),  # under Slurm, its node's name
            "main_thread": f"0x{threading.main_thread().ident:016x}"})
        self._thread = threading.Thread(target=self._serve, name="stack-requests", daemon=True)
        self._thread.start()
        return self

    def _serve(self):
        """Answers every REQUEST newer than this rank's start with one dump."""
        answered = time.time()
        request = os.path.join(self.directory, REQUEST)
        while not self._stop.wait(POLL_S):
            try:
                asked = os.stat(request).st_mtime
            except OSError:
                continue
            if asked > answered:
                answered = asked
                self.dump("on request")

    def dump(self, reason: str, error: BaseException | None = None) -> None:
        """Appends every thread's stack and where this rank waits. With `error` (a
        collective that failed), the main thread's stack is where it raised, and the
        collective is the one it left."""
        if self._file is None:
            return
        self._file.write(f"== {time.strftime('%H:%M:%S')} {reason}\n")
        if error is not None:
            self._file.write(_as_dump(error))
        self._file.flush()
        faulthandler.dump_traceback(self._file, all_threads=True)
        where = self.where.failed if error is not None else self.where.snapshot()
        _write_json(self.path(".where.json"), {"reason": reason, "time": time.time(),
                                               "where": where})

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._file is not None:
            faulthandler.unregister(STACK_SIGNAL)
            self._file.close()
            self._file = None


def _as_dump(error: BaseException) -> str:
    """The stack `error` left, in faulthandler's form, as the main thread's: where the
    collective raised, not where the handler runs."""
    import traceback
    frames = traceback.extract_tb(error.__traceback__)
    lines = [f"Current thread 0x{threading.main_thread().ident:016x} (most recent call first):"]
    lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in reversed(frames)]
    return "\n".join(lines) + "\n\n"


def _write_json(path: str, payload: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)  # a reader never sees half of it


def report(dump: StackDump, world_size: int, is_chief: bool, reason: str,
           wait_s: float, error: BaseException | None = None) -> None:
    """On a stall or a lost peer (`error`), on every rank: dump this rank's stacks. The
    chief then waits up to wait_s for the others' dumps and prints the summary; the
    others wait a little longer, so that the chief speaks before a launcher ends the job."""
    started = time.time()
    dump.dump(reason, error)
    if not is_chief:
        time.sleep(wait_s + 1.0)
        return
    # A peer's watchdog may have fired a poll (<= 1 s) before this one: its dump counts.
    wait_for_dumps(dump.directory, world_size, started - 2 * wait_s, wait_s)
    lines = [f"stacks | {reason}: where each rank was (files in {dump.directory}):"]
    lines += [f"stacks | {line}" for line in summary(dump.directory, world_size)]
    import sys
    sys.stderr.write("\n".join(lines) + "\n")  # one write: a launcher never splits it
    sys.stderr.flush()
