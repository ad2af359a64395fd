"""Where a stuck job is stuck: every rank's Python stack, and the collective it waits in.

Each rank of a run with --run_dir keeps, in RUN_DIR/stacks/:
  rank<R>.json   its pid, host and main thread, written at start (what `python -m launch
                 stacks` reads to find the ranks);
  rank<R>.txt    its Python stacks, all threads, appended at every dump (the newest
                 MAX_DUMP_BYTES of whole dumps);
  rank<R>.where.json   at every dump: the collective it was in (name, step, bytes).
The directory is this user's and 0700, its files 0600, and none is opened through a link
(launch/private_files.py): a stacks dir another user made is refused in one line, and
the run goes on without dumps.
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

from absl import logging

from launch.private_files import PrivateDir, Refused, describe, is_ours
from launch.redact import redact
from launch.stacks import DIR_NAME, REQUEST, process_identity, summary, wait_for_dumps

STACK_SIGNAL = signal.SIGUSR2
POLL_S = 0.5  # how often a rank looks for a request: a stat, nothing more
# rank<R>.txt's cap: a request every few seconds for hours (29 MB an hour) must not fill a
# disk. 4 MiB holds a thousand or more dumps of a usual rank; past it the oldest go.
MAX_DUMP_BYTES = 4 * 2**20


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
    """This rank's stack files under `directory` (RUN_DIR/stacks), a directory of this
    user's, 0700, every file in it 0600 and written without following a link
    (launch/private_files.py): the run dir may be storage other users can write."""
    directory: str
    rank: int
    where: Whereabouts = dataclasses.field(default_factory=Whereabouts)
    _dir: PrivateDir | None = None
    _file: object = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _foreign_request: bool = False  # said once: a REQUEST not ours is ignored
    _since: float = 0.0  # requests older than this rank are not for it

    def name(self, suffix: str, rank: int | None = None) -> str:
        return f"rank{self.rank if rank is None else rank}{suffix}"

    def path(self, suffix: str, rank: int | None = None) -> str:
        return os.path.join(self.directory, self.name(suffix, rank))

    @property
    def enabled(self) -> bool:
        return self._dir is not None

    @property
    def private_dir(self) -> PrivateDir | None:
        """The stacks directory as install opened and checked it (None: refused)."""
        return self._dir

    def install(self) -> "StackDump":
        """Opens the stack file and answers STACK_SIGNAL with a dump (not at import:
        called once the rank is known). A stacks dir that is not this user's is refused
        in one line, and the run goes on without dumps."""
        # Before rank<R>.json exists (a request needs it), and a little earlier: a file's
        # time comes from the kernel's coarse clock, up to a tick behind time.time().
        self._since = time.time() - 0.05
        try:
            self._dir = PrivateDir.open(self.directory)
            self._open_files()
        except (Refused, OSError) as err:  # a dump is an aid: the run goes on without
            logging.warning("stacks | %s; this run goes on without stack dumps",
                            err if isinstance(err, Refused) else f"{self.directory!r}: {err}")
            self.close()
            return self
        self._thread = threading.Thread(target=self._serve, name="stack-requests", daemon=True)
        self._thread.start()
        return self

    def _open_files(self) -> None:
        self._dir.remove(self.name(".where.json"))  # a relaunch's files start empty
        self._use_stack_file(self._dir.write_new(self.name(".txt"), b""))
        identity = process_identity(os.getpid()) or {}
        self._dir.write_atomic(self.name(".json"), json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "slurm_node": os.environ.get("SLURMD_NODENAME"),  # under Slurm, its node's name
            "main_thread": f"0x{threading.main_thread().ident:016x}",
            # Which process this pid is: `launch stacks --native` checks it before py-spy.
            "start": identity.get("start"), "boot": identity.get("boot")}).encode())

    def _use_stack_file(self, fd: int) -> None:
        """Dumps go to `fd` from now on, faulthandler's on STACK_SIGNAL too."""
        old, self._file = self._file, os.fdopen(fd, "a", buffering=1)
        faulthandler.register(STACK_SIGNAL, file=self._file, all_threads=True, chain=False)
        if old is not None:
            old.close()

    def _serve(self):
        """Answers every REQUEST newer than this rank's start with one dump, and keeps
        the stack file under its cap (STACK_SIGNAL's dumps bypass dump())."""
        answered = self._since
        while not self._stop.wait(POLL_S):
            asked = self._asked()
            if asked is not None and asked > answered:
                answered = asked
                self.dump("on request")
            else:
                with self._lock:
                    self._keep_under_cap()

    def _asked(self) -> float | None:
        """When REQUEST was last touched, if it is a file of this user's: one another
        user put there (while the directory was open to them), or a link, is ignored."""
        found = self._dir.entry(REQUEST)
        if found is None:
            return None
        if is_ours(found):
            return found.st_mtime
        if not self._foreign_request:
            self._foreign_request = True
            path = os.path.join(self.directory, REQUEST)
            logging.warning("stacks | %r: received %s; expected a file of yours. Fix: remove "
                            "it (rm %s); until then no request is answered", path,
                            describe(found), path)
        return None

    def dump(self, reason: str, error: BaseException | None = None) -> None:
        """Appends every thread's stack and where this rank waits. With `error` (a
        collective that failed), the main thread's stack is where it raised, and the
        collective is the one it left."""
        with self._lock:
            if self._file is None:
                return
            self._file.write(f"== {time.strftime('%H:%M:%S')} {reason}\n")
            if error is not None:
                self._file.write(_as_dump(error))
            self._file.flush()
            faulthandler.dump_traceback(self._file, all_threads=True)
            self._keep_under_cap()
            where = self.where.failed if error is not None else self.where.snapshot()
            self._dir.write_atomic(self.name(".where.json"), json.dumps(
                {"reason": reason, "time": time.time(), "where": where}).encode())

    def _keep_under_cap(self) -> None:
        """Past MAX_DUMP_BYTES, the stack file keeps its newest whole dumps in half of it
        (halving, so that a request loop rewrites it once per many dumps)."""
        if self._file is None:
            return
        self._file.flush()
        size = os.fstat(self._file.fileno()).st_size
        if size > MAX_DUMP_BYTES:
            kept = newest_dumps(os.pread(self._file.fileno(), size, 0), MAX_DUMP_BYTES // 2)
            self._use_stack_file(self._dir.write_new(self.name(".txt"), kept))

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._file is not None:
                faulthandler.unregister(STACK_SIGNAL)
                self._file.close()
                self._file = None
            if self._dir is not None:
                self._dir.close()
                self._dir = None


def newest_dumps(text: bytes, keep: int) -> bytes:
    """The newest whole dumps of `text` (each starts at a '== ' line) that fit in `keep`
    bytes; of a single dump larger than that, its last `keep` bytes."""
    if len(text) <= keep:
        return text
    cut = text.find(b"\n== ", len(text) - keep - 1)
    return text[cut + 1:] if cut >= 0 else text[-keep:]


def _as_dump(error: BaseException) -> str:
    """The stack `error` left, in faulthandler's form, as the main thread's: where the
    collective raised, not where the handler runs."""
    import traceback
    frames = traceback.extract_tb(error.__traceback__)
    lines = [f"Current thread 0x{threading.main_thread().ident:016x} (most recent call first):"]
    lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in reversed(frames)]
    return "\n".join(lines) + "\n\n"


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
    if not dump.enabled:
        return  # its directory was refused (install said so): no summary to read
    # A peer's watchdog may have fired a poll (<= 1 s) before this one: its dump counts.
    # Read through the directory install opened: its path may point elsewhere by now.
    wait_for_dumps(dump.private_dir, world_size, started - 2 * wait_s, wait_s)
    lines = [f"stacks | {reason}: where each rank was (files in {dump.directory}):"]
    lines += [f"stacks | {line}" for line in summary(dump.private_dir, world_size)]
    import sys
    sys.stderr.write(redact("\n".join(lines)) + "\n")  # one write: a launcher never splits it
    sys.stderr.flush()
