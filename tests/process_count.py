"""The processes a test session starts, counted per tier for the `tiers |` line.

A launch is what a multi-rank test pays for (issue 64): each rank imports TensorFlow and
traces its step, tens of seconds on a 2-core machine, while the behaviour under test takes
well under one. So every `make test` log says how many Python processes each tier started
and how many of them were ranks, beside the seconds.

How: the session marks its environment (MARKER, inherited by every child, as child_env
copies os.environ, and passed on by horovodrun, mpirun and Slurm's default --export=ALL),
and a thread of the pytest process scans /proc every POLL_S for Python processes that carry
the marker. Nothing is installed into the children. It samples: a process that lives less
than POLL_S may be missed, which no rank does (TensorFlow's import alone takes seconds).
"""
import os
import threading
import uuid

MARKER = "HOROVOD_TRAIN_TEST_SESSION"
POLL_S = 0.25
# A launcher's per-rank variable in a process's environment makes it a rank: horovodrun
# (Gloo), Open MPI, Slurm's srun, an MWMS worker.
RANK_VARIABLES = (b"HOROVOD_RANK=", b"OMPI_COMM_WORLD_RANK=", b"SLURM_PROCID=", b"TF_CONFIG=")


class ProcessCounter:
    """Per tier: Python processes the tests started, and how many were ranks."""

    def __init__(self):
        self.session = uuid.uuid4().hex
        self.tier = None  # the running test's tier (set by the tier clock)
        self.processes, self.ranks = {}, {}
        self._counted = set()  # pids of Python processes, ours or not
        self._ranks = set()  # pids counted as ranks
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        os.environ[MARKER] = self.session
        self._thread = threading.Thread(target=self._watch, name="process-count", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.environ.pop(MARKER, None)

    def _watch(self):
        marker = f"{MARKER}={self.session}".encode()
        while not self._stop.wait(POLL_S):
            for pid in os.listdir("/proc"):
                if pid.isdigit() and pid not in self._counted:
                    self._look(pid, marker)

    def _look(self, pid: str, marker: bytes):
        """Counts `pid` once it runs Python. A pid that runs something else is looked at
        again next time: a launcher forks, then the child execs Python under the same pid."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0", 1)[0])
            if not program.startswith(b"python"):
                return
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            return  # gone already
        self._counted.add(pid)
        if marker not in environ.split(b"\0"):
            return
        tier = self.tier or "?"
        self.processes[tier] = self.processes.get(tier, 0) + 1
        # A rank's own Python children inherit its variables: they are no ranks.
        if any(name in environ for name in RANK_VARIABLES) and _parent(pid) not in self._ranks:
            self._ranks.add(pid)
            self.ranks[tier] = self.ranks.get(tier, 0) + 1

    def words(self, tier: str) -> str:
        """' 123 processes (96 ranks)', or '' for a tier that started none."""
        if not self.processes.get(tier):
            return ""
        return f" {self.processes[tier]} processes ({self.ranks.get(tier, 0)} ranks)"


def _parent(pid: str) -> str | None:
    """The parent's pid, from /proc/PID/stat (its 4th field, after the name in parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[1].decode()
    except (OSError, IndexError):
        return None
