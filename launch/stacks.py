"""`python -m launch stacks --run_dir D`: every rank's stacks of a live job, which runs on.

Each rank of a run with --run_dir registered itself in D/stacks/rank<R>.json (its pid
and host) and appends its Python stacks, and where it waits, to D/stacks/ when it finds
D/stacks/REQUEST newer than its last answer (horovod_train/stacks.py). This command
touches REQUEST, waits for the dumps, and prints where each rank is (the summary the
chief prints on a stall). A rank whose host does not share the run dir is named with
the command to run on its host. With --native and py-spy on the PATH, `py-spy dump
--native` adds each local rank's native frames (TensorFlow's C++, Horovod's background
thread) in D/stacks/rank<R>.native.txt, for a pid that is verifiably the rank
(not_the_rank). D/stacks is opened as the ranks open it (launch/private_files.py): a
directory or a REQUEST that is not this user's is refused in one line.
"""
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import time

from launch.errors import LaunchError, launch_error
from launch.private_files import PrivateDir, Refused, describe, is_ours, owner
from launch.procstat import start_time

# The files each rank keeps in RUN_DIR/DIR_NAME (horovod_train/stacks.py writes them).
DIR_NAME = "stacks"
REQUEST = "REQUEST"  # touched by this command; every rank dumps when it is newer
# Frames of these files are the machinery, not the place: the summary skips them.
_MACHINERY = re.compile(r"/(site-packages|dist-packages|lib/python3\.\d+)/|^<frozen ")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _read_json(directory: PrivateDir, name: str) -> dict | None:
    """The object in `name`, a file of this user's in `directory` (never through a
    link), or None."""
    try:
        found = json.loads(directory.read(name) or "null")
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def last_dump(text: str) -> str:
    """The newest dump of a stack file (dumps are appended, each after a '== ' line)."""
    start = text.rfind("\n== ")
    return text[start + 1:] if start >= 0 else text


def innermost_frame(dump: str, thread: str | None) -> str | None:
    """'trainer.py:245 in _run': the innermost frame of `thread` (the main thread;
    None: the first thread listed) outside Python's and site-packages' files. A thread
    listed twice (a failed collective's stack, then the live one) counts as first listed."""
    current, frames = None, {}
    for line in dump.splitlines():
        found = _THREAD.match(line)
        if found:
            current = found.group(1) if found.group(1) not in frames else None
            if current is not None:
                frames[current] = []
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            frames[current].append(frame)
    chosen = frames.get(thread) if thread else next(iter(frames.values()), None)
    for frame in chosen or []:  # most recent call first
        if not _MACHINERY.search(frame.group("file")):
            return f"{os.path.basename(frame.group('file'))}:{frame.group('line')} in " \
                   f"{frame.group('func')}"
    return None


def describe_rank(directory: PrivateDir, rank: int) -> str:
    """One summary line for `rank` from its files in `directory` (read through the
    directory opened and checked: renaming its path away since changes nothing)."""
    info = _read_json(directory, f"rank{rank}.json")
    where = _read_json(directory, f"rank{rank}.where.json")
    dump = last_dump(directory.read(f"rank{rank}.txt") or "")
    if not dump.strip() or where is None:
        host = f" (pid {info['pid']} on {info['host']})" if info else ""
        return (f"rank {rank}{host}: no stack written: gone (killed, crashed), stopped, "
                f"or on a host whose --run_dir this is not")
    frame = innermost_frame(dump, info.get("main_thread") if info else None) or "no frame of ours"
    now = where.get("where")
    if now:
        nbytes = now.get("bytes") or 0
        size = f", {nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else \
            f", {nbytes} bytes" if nbytes else ""
        waited = where["time"] - now["since"]
        return (f"rank {rank}: in {now['collective']} (step {now['step']}{size}) for "
                f"{waited:.0f} s, at {frame}")
    return f"rank {rank}: not in a collective, at {frame}"


def summary(directory: PrivateDir, world_size: int) -> list[str]:
    """A line per rank, then who the others wait for: the ranks in no collective."""
    lines = [describe_rank(directory, rank) for rank in range(world_size)]
    waiting = [r for r, line in enumerate(lines) if ": in " in line]
    behind = [r for r, line in enumerate(lines) if ": in " not in line]
    if waiting and behind:
        lines.append(f"rank{'s' if len(waiting) > 1 else ''} "
                     f"{', '.join(map(str, waiting))} wait{'s' if len(waiting) == 1 else ''} "
                     f"for rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))}")
    return lines


def wait_for_dumps(directory: PrivateDir, world_size: int, since: float, timeout_s: float) -> list[int]:
    """Waits up to timeout_s for every rank's dump made after `since`; returns the ranks
    that made none."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [r for r in range(world_size)
                   if ((_read_json(directory, f"rank{r}.where.json") or {})
                       .get("time", 0) < since)]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)



@dataclasses.dataclass(frozen=True)
class StacksRequest:
    run_dir: str
    wait_s: float = 10.0
    native: bool = False


def _ranks(directory: PrivateDir) -> dict[int, dict]:
    """{rank: its rank<R>.json} of the registrations that are files of ours and say a pid
    and a host; others are not read."""
    found = {}
    for entry in directory.names():
        name = entry[len("rank"):-len(".json")]
        info = _read_json(directory, entry) \
            if entry.startswith("rank") and entry.endswith(".json") and name.isdigit() else None
        if info and isinstance(info.get("pid"), int) and info["pid"] > 0 \
                and isinstance(info.get("host"), str):
            found[int(name)] = info
    return found


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (someone else's counts: it is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def process_identity(pid: int) -> dict | None:
    """What tells process `pid` from every later process given the same number: this
    boot's id and the time it started (procstat.start_time); and its owner. None where
    there is no /proc, or no such process, or it has ended."""
    started = start_time(pid)
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        with open(_BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:
        return None
    return None if started is None else {"start": started, "boot": boot, "uid": uid}


def not_the_rank(info: dict) -> str | None:
    """Why py-spy must not attach to the pid rank<R>.json (`info`) names; None: it is
    the rank. py-spy stops a process while it reads it, so it must be the rank and
    nothing else. The rule: rank<R>.json is read only as a file of this user's in a
    stacks dir of this user's, 0700 (no one else can write there), so a process of ours
    wrote it, at its start, with its pid, start time and boot id. A pid alone may have
    been given to another process since the rank ended; (boot, pid, start time) never
    is. So the pid's start time and the boot must be the ones recorded, and the
    process must still be this user's."""
    pid = info["pid"]
    now = process_identity(pid)
    if now is None:
        return f"pid {pid} cannot be checked (not running, or no /proc on this host)"
    if info.get("start") is None or info.get("boot") is None:
        return f"its rank<R>.json does not record when pid {pid} started (an older version's)"
    if (now["boot"], now["start"]) != (info["boot"], info["start"]):
        return f"pid {pid} is another process now (the rank has ended)"
    if now["uid"] != os.geteuid():
        return f"pid {pid} is another user's process ({owner(now['uid'])})"
    return None


def _native(directory: PrivateDir, rank: int, info: dict) -> str:
    """py-spy's dump of the rank's pid with native frames, into rank<R>.native.txt;
    its status."""
    spy = shutil.which("py-spy")
    if spy is None:
        return "no py-spy on the PATH (pip install py-spy) for native frames"
    impostor = not_the_rank(info)
    if impostor is not None:
        return f"no native frames: {impostor}"
    try:
        proc = subprocess.run([spy, "dump", "--native", "--pid", str(info["pid"])],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no native frames: py-spy did not finish reading pid {info['pid']} in 60 s"
    # The rank may have ended while py-spy read it, and its pid gone to another process:
    # what py-spy printed then is not the rank's.
    changed = not_the_rank(info)
    if changed is not None:
        return f"no native frames: {changed}, while py-spy read it (its output is dropped)"
    name = f"rank{rank}.native.txt"
    directory.write_atomic(name, (proc.stdout + proc.stderr).encode())
    path = os.path.join(directory.path, name)
    return f"native frames in {path}" if proc.returncode == 0 else \
        f"py-spy could not read it ({proc.stderr.strip().splitlines()[-1:]})"


def _no_ranks(run_dir: str) -> LaunchError:
    return launch_error("--run_dir", run_dir,
                        f"the run dir of a live job started with --run_dir (it holds "
                        f"{DIR_NAME}/rank<R>.json)",
                        "pass the --run_dir the training command was given")


def _ask(directory: PrivateDir, when: float) -> None:
    """Writes REQUEST (its modification time is the request), refusing one that is not a
    file of ours: a link is never written through, nor another user's file touched."""
    found = directory.entry(REQUEST)
    if found is not None and not is_ours(found):
        path = os.path.join(directory.path, REQUEST)
        raise LaunchError(f"{path!r}: received {describe(found)}; expected a file of yours "
                          f"or none. Fix: remove it (rm {path}) and ask again")
    directory.write_atomic(REQUEST, f"{when}\n".encode())


def _note(directory: PrivateDir, rank: int, info: dict, native: bool) -> str | None:
    if info["host"] != socket.gethostname():
        return (f"rank {rank} runs on {info['host']}: if its run dir is not this one, "
                f"run this command there")
    if not alive(info["pid"]):
        return f"rank {rank} (pid {info['pid']}) is not running"
    return f"rank {rank}: {_native(directory, rank, info)}" if native else None


def dump_live(request: StacksRequest) -> str:
    """Asks this job's ranks for a dump, waits for them; the summary text."""
    path = os.path.join(request.run_dir, DIR_NAME)
    if not os.path.lexists(path):
        raise _no_ranks(request.run_dir)
    try:
        directory = PrivateDir.open(path, create=False)
    except Refused as err:
        raise LaunchError(str(err)) from None
    with directory:
        ranks = _ranks(directory)
        if not ranks:
            raise _no_ranks(request.run_dir)
        started = time.time()
        _ask(directory, started)
        notes = [_note(directory, rank, info, request.native)
                 for rank, info in sorted(ranks.items())]
        wait_for_dumps(directory, max(ranks) + 1, started, request.wait_s)
        lines = [f"stacks of the job in {request.run_dir}, on request (files in {path}):"]
        lines += summary(directory, max(ranks) + 1) + [note for note in notes if note]
    return "\n".join(lines) + "\n"
