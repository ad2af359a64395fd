"""One writer per checkpoint directory: an exclusive flock on <dir>/.writer.lock.

Two jobs sharing a --checkpoint_dir would prune each other's checkpoints (and delete
each other's writes in progress). The chief holds this lock for the whole run and
writes who it is into the file, so a second job is refused with one line naming the
first. The kernel drops an flock when its holder dies, so a killed job never blocks
its own relaunch.
"""
import atexit
import contextlib
import fcntl
import json
import os
import socket
import time

from absl import logging

from horovod_train.errors import UsageError, write_error

LOCK_NAME = ".writer.lock"


# The locks this process holds: flock conflicts between two open files even in one
# process, so a second Checkpointer on the same directory shares the first's lock
# (and the first release ends it: one run at a time per process is the normal case).
_HELD: dict[str, object] = {}


def acquire_writer_lock(directory: str) -> str:
    """Makes this process the directory's only writer until release or exit (the kernel
    drops an flock when its holder dies, so a killed job never blocks its relaunch).
    Raises UsageError naming the holder when another process writes there."""
    key = os.path.realpath(directory)
    if key not in _HELD:
        if not _HELD:
            atexit.register(lambda: [release_writer_lock(k) for k in list(_HELD)])
        _HELD[key] = _lock(directory)
    return key


def release_writer_lock(key: str | None):
    handle = _HELD.pop(key, None)
    if handle is not None:
        # Unlinked while still held, so a process that opens the name next finds a new
        # file; one that opened the old file first sees its inode gone and retries.
        with contextlib.suppress(OSError):
            if _same_file(handle):
                os.unlink(handle.name)
        handle.close()  # closing the file drops the flock


def _same_file(handle) -> bool:
    try:
        return os.stat(handle.name).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _lock(directory: str, tries: int = 5):
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
        logging.warning("checkpoint | cannot lock %s (%s): a second job writing there would "
                        "not be detected", directory, err.strerror)
        return None
    if not _same_file(handle) and tries > 1:  # its holder released (and unlinked) it meanwhile
        handle.close()
        return _lock(directory, tries - 1)
    handle.truncate(0)  # "a+" writes at the end, which is now 0
    handle.write(json.dumps(_identity()))
    handle.flush()
    return handle


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


def foreign_writer(directory: str, holder: dict, unknown="it did not say who") -> UsageError:
    who = ", ".join(str(part) for part in (
        holder.get("pid") and f"pid {holder['pid']}", holder.get("host") and f"on {holder['host']}",
        holder.get("job"), holder.get("started") and f"since {holder['started']}") if part)
    return ForeignWriter(f"--checkpoint_dir: received {directory!r}, which another job is "
                         f"writing to ({who or unknown}); expected a directory only "
                         f"this job writes (its pruning would delete the other's checkpoints). "
                         f"Fix: give each job its own --checkpoint_dir, or wait until that job ends")


class ForeignWriter(UsageError):
    """Another live process holds the directory's writer lock."""
