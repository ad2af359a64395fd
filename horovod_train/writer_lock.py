"""One writer per checkpoint directory: the chief holds the directory's writer lock for
the whole run.

Two jobs sharing a --checkpoint_dir would prune each other's checkpoints (and delete
each other's writes in progress), so a second job is refused with one line naming the
first. Which lock, the rule in one place (`_take`):

- a local directory: an exclusive flock on <dir>/.writer.lock, with who holds it written
  into the file. The kernel drops an flock when its holder dies, so a killed job never
  blocks its own relaunch.
- a URL (gs://, s3://, ...: no POSIX locks there), or a local filesystem that refuses
  flock (some NFS mounts): a lease, <dir>/.writer.lease, naming its holder and when it
  was last renewed. The holder renews it every LEASE_RENEW_S seconds and before each
  checkpoint it writes; a second job is refused while the lease is fresh. One not
  renewed for LEASE_STALE_S seconds, or held by a process of this host that is gone, is
  taken over, with a warning naming whose it was: so a job killed on another host
  blocks its relaunch for up to LEASE_STALE_S (the refusal says so, and that deleting
  the lease ends the wait). A job that finds its lease taken over writes no further
  checkpoint. Object stores offer no compare-and-swap through tf.io.gfile: two jobs
  starting at the same moment may both write a lease; the one whose lease stays is the
  writer, and the other refuses when it reads the lease back, or at its next save.
"""
import atexit
import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid

from absl import logging

from horovod_train import fs
from horovod_train.errors import UsageError, write_error
from launch.stacks import alive  # standard library only, like all of launch/

LOCK_NAME, LEASE_NAME = ".writer.lock", ".writer.lease"
LEASE_RENEW_S, LEASE_STALE_S = 30, 300


# The locks this process holds: flock conflicts between two open files even in one
# process, so a second Checkpointer on the same directory shares the first's lock
# (and the first release ends it: one run at a time per process is the normal case).
_HELD: dict[str, object] = {}


def acquire_writer_lock(directory: str) -> str:
    """Makes this process the directory's only writer until release or exit; called
    again while held, it confirms (and renews) a lease. Raises UsageError naming the
    holder when another process writes there."""
    key = os.path.realpath(fs.local_path(directory)) if fs.is_local(directory) \
        else directory.rstrip("/")
    if key in _HELD:
        _HELD[key].confirm()
        return key
    if not _HELD:
        atexit.register(lambda: [release_writer_lock(k) for k in list(_HELD)])
    _HELD[key] = _take(directory)
    return key


def release_writer_lock(key: str | None):
    held = _HELD.pop(key, None)
    if held is not None:
        held.release()


def _take(directory: str):
    """The rule: an flock on a local directory, else (or where flock is refused) a lease."""
    if not fs.is_local(directory):
        return _Lease.take(directory)
    return _Flock.take(fs.local_path(directory))


class _Flock:
    def __init__(self, handle):
        self.handle = handle

    @classmethod
    def take(cls, directory: str, tries: int = 5):
        try:
            os.makedirs(directory, exist_ok=True)
            # "a+": opening must not truncate, or it would erase the holder's identity.
            handle = open(os.path.join(directory, LOCK_NAME), "a+")
        except OSError as err:
            raise write_error("--checkpoint_dir", os.path.join(directory, LOCK_NAME), err) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            raise foreign_writer(directory, holder) from None
        except OSError as err:  # some network file systems have no flock (ENOLCK, EOPNOTSUPP)
            handle.close()
            logging.info("checkpoint | cannot flock %s (%s): a lease file guards it instead",
                         directory, err.strerror)
            return _Lease.take(directory)
        if not _same_file(handle) and tries > 1:  # its holder released (and unlinked) it meanwhile
            handle.close()
            return cls.take(directory, tries - 1)
        handle.truncate(0)  # "a+" writes at the end, which is now 0
        handle.write(json.dumps(_identity()))
        handle.flush()
        return cls(handle)

    def confirm(self):
        """An flock cannot be taken from a live holder: nothing to check."""

    def release(self):
        # Unlinked while still held, so a process that opens the name next finds a new
        # file; one that opened the old file first sees its inode gone and retries.
        with contextlib.suppress(OSError):
            if _same_file(self.handle):
                os.unlink(self.handle.name)
        self.handle.close()  # closing the file drops the flock


def _same_file(handle) -> bool:
    try:
        return os.stat(handle.name).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _identity() -> dict:
    job = next((f"{name}={os.environ[name]}" for name in
                ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID")
                if os.environ.get(name)), None)
    return {"host": socket.gethostname(), "pid": os.getpid(), "job": job,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _holder(handle) -> dict:
    for _ in range(5):  # the holder may be between its truncate and its write
        handle.seek(0)
        try:
            return dict(json.loads(handle.read()))
        except (ValueError, TypeError):
            time.sleep(0.1)
    return {}


def _who(holder: dict) -> str:
    return ", ".join(str(part) for part in (
        holder.get("pid") and f"pid {holder['pid']}", holder.get("host") and f"on {holder['host']}",
        holder.get("job"), holder.get("started") and f"since {holder['started']}") if part)


def foreign_writer(directory: str, holder: dict, unknown="it did not say who",
                   lease: str | None = None) -> UsageError:
    """The refusal; with `lease` (its path), when the holder last renewed it and how the
    wait ends."""
    who, wait = _who(holder) or unknown, ""
    if lease:
        who += f"; its lease {lease} was renewed {_age(holder):.0f} s ago"
        wait = (f" (a lease not renewed for {LEASE_STALE_S} s is taken over; if that job is "
                f"surely gone, delete {lease})")
    return ForeignWriter(f"--checkpoint_dir: received {directory!r}, which another job is "
                         f"writing to ({who}); expected a directory only "
                         f"this job writes (its pruning would delete the other's checkpoints). "
                         f"Fix: give each job its own --checkpoint_dir, or wait until that job "
                         f"ends{wait}")


class ForeignWriter(UsageError):
    """Another live process holds the directory's writer lock."""


def _age(holder: dict) -> float:
    """Seconds since the lease was renewed; infinite when it does not say."""
    renewed = holder.get("renewed")
    return time.time() - renewed if type(renewed) in (int, float) else float("inf")


def _takeover(holder: dict) -> str | None:
    """Why a lease held by `holder` may be taken over, or None while it holds."""
    if not holder:
        return "it is unreadable"
    age, pid = _age(holder), holder.get("pid")
    if age > LEASE_STALE_S:
        return f"not renewed for {age:.0f} s, more than {LEASE_STALE_S} s"
    if holder.get("host") == socket.gethostname() and type(pid) is int and not alive(pid):
        return f"its process {pid} on this host is gone"
    return None


class _Lease:
    """<dir>/.writer.lease held by this process: taken, renewed by a thread and before
    each checkpoint (confirm), deleted on release."""

    def __init__(self, directory: str):
        self.directory, self.path = directory, os.path.join(directory, LEASE_NAME)
        self.mine = dict(_identity(), token=uuid.uuid4().hex)
        self.taken_by = None  # the job that took it over: lost for good, even once it ends
        self._guard, self._stop = threading.Lock(), threading.Event()

    @classmethod
    def take(cls, directory: str):
        lease = cls(directory)
        try:
            fs.makedirs(directory)
            holder = lease._read()
            if holder is not None:
                why = _takeover(holder)
                if why is None:
                    raise foreign_writer(directory, holder, lease=lease.path)
                logging.warning("checkpoint | took over the writer lease %s of %s: %s",
                                lease.path, _who(holder) or "an unknown job", why)
            lease.confirm(check=False)
            lease.confirm()  # read back: of two jobs writing at one moment, one stays
        except OSError as err:
            raise write_error("--checkpoint_dir", lease.path, err) from None
        threading.Thread(target=lease._keep, name="writer-lease", daemon=True).start()
        return lease

    def _read(self) -> dict | None:
        """The lease's holder; None when there is no lease, {} when it is unreadable."""
        try:
            holder = json.loads(fs.read_bytes(self.path))
        except FileNotFoundError:
            return None
        except ValueError:
            return {}
        return holder if isinstance(holder, dict) else {}

    def confirm(self, check: bool = True):
        """Renews the lease; first (check) raises ForeignWriter if another job holds it now."""
        with self._guard:
            if self._stop.is_set():
                return
            holder = self._read() if check else None
            # Gone (deleted by hand) is no other holder: this job writes it again.
            if holder is not None and holder.get("token") != self.mine["token"]:
                self.taken_by = self.taken_by or holder
            if self.taken_by is not None:
                raise foreign_writer(self.directory, self.taken_by, lease=self.path)
            fs.write_atomic(self.path, json.dumps(dict(self.mine, renewed=time.time())).encode())

    def _keep(self):
        while not self._stop.wait(LEASE_RENEW_S):
            try:
                self.confirm()
            except ForeignWriter as err:
                return logging.error("checkpoint | lost the writer lease: %s", err)
            except OSError as err:
                logging.warning("checkpoint | could not renew the writer lease %s (%s); "
                                "trying again in %d s", self.path, err, LEASE_RENEW_S)

    def release(self):
        self._stop.set()
        with self._guard, contextlib.suppress(OSError):
            if (self._read() or {}).get("token") == self.mine["token"]:
                fs.remove(self.path)
