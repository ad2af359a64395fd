"""`python -m launch stacks --run_dir D`: every rank's stacks of a live job, which runs on.

Each rank of a run with --run_dir registered itself in D/stacks/rank<R>.json (its pid
and host) and appends its Python stacks, and where it waits, to D/stacks/ when it finds
D/stacks/REQUEST newer than its last answer (horovod_train/stacks.py). This command
touches REQUEST, waits for the dumps, and prints where each rank is (the summary the
chief prints on a stall). A rank whose host does not share the run dir is named with
the command to run on its host. With --native and py-spy on the PATH, `py-spy dump
--native` adds each local rank's native frames (TensorFlow's C++, Horovod's background
thread) in D/stacks/rank<R>.native.txt.
"""
import dataclasses
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import time

from launch.errors import launch_error

# The files each rank keeps in RUN_DIR/DIR_NAME (horovod_train/stacks.py writes them).
DIR_NAME = "stacks"
REQUEST = "REQUEST"  # touched by this command; every rank dumps when it is newer
# Frames of these files are the machinery, not the place: the summary skips them.
_MACHINERY = re.compile(r"/(site-packages|dist-packages|lib/python3\.\d+)/|^<frozen ")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")




def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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


def describe_rank(directory: str, rank: int) -> str:
    """One summary line for `rank` from its files under `directory`."""
    info = _read_json(os.path.join(directory, f"rank{rank}.json"))
    where = _read_json(os.path.join(directory, f"rank{rank}.where.json"))
    try:
        with open(os.path.join(directory, f"rank{rank}.txt")) as f:
            dump = last_dump(f.read())
    except OSError:
        dump = ""
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


def summary(directory: str, world_size: int) -> list[str]:
    """A line per rank, then who the others wait for: the ranks in no collective."""
    lines = [describe_rank(directory, rank) for rank in range(world_size)]
    waiting = [r for r, line in enumerate(lines) if ": in " in line]
    behind = [r for r, line in enumerate(lines) if ": in " not in line]
    if waiting and behind:
        lines.append(f"rank{'s' if len(waiting) > 1 else ''} "
                     f"{', '.join(map(str, waiting))} wait{'s' if len(waiting) == 1 else ''} "
                     f"for rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))}")
    return lines


def wait_for_dumps(directory: str, world_size: int, since: float, timeout_s: float) -> list[int]:
    """Waits up to timeout_s for every rank's dump made after `since`; returns the ranks
    that made none."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [r for r in range(world_size)
                   if ((_read_json(os.path.join(directory, f"rank{r}.where.json")) or {})
                       .get("time", 0) < since)]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)



@dataclasses.dataclass(frozen=True)
class StacksRequest:
    run_dir: str
    wait_s: float = 10.0
    native: bool = False


def _ranks(directory: str) -> dict[int, dict]:
    found = {}
    for path in glob.glob(os.path.join(directory, "rank*.json")):
        name = os.path.basename(path)[len("rank"):-len(".json")]
        if name.isdigit():
            with open(path) as f:
                found[int(name)] = json.load(f)
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


def _native(directory: str, rank: int, pid: int) -> str:
    """py-spy's dump of `pid` with native frames, into rank<R>.native.txt; its status."""
    spy = shutil.which("py-spy")
    if spy is None:
        return "no py-spy on the PATH (pip install py-spy) for native frames"
    proc = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    path = os.path.join(directory, f"rank{rank}.native.txt")
    with open(path, "w") as f:
        f.write(proc.stdout + proc.stderr)
    return f"native frames in {path}" if proc.returncode == 0 else \
        f"py-spy could not read it ({proc.stderr.strip().splitlines()[-1:]})"


def dump_live(request: StacksRequest) -> str:
    """Signals this host's ranks, waits for their dumps; the summary text."""
    directory = os.path.join(request.run_dir, DIR_NAME)
    ranks = _ranks(directory)
    if not ranks:
        raise launch_error("--run_dir", request.run_dir,
                           f"the run dir of a live job started with --run_dir (it holds "
                           f"{DIR_NAME}/rank<R>.json)",
                           "pass the --run_dir the training command was given")
    host, notes = socket.gethostname(), []
    started = time.time()
    with open(os.path.join(directory, REQUEST), "w") as f:
        f.write(f"{started}\n")  # its modification time is the request
    for rank, info in sorted(ranks.items()):
        if info["host"] != host:
            notes.append(f"rank {rank} runs on {info['host']}: if its run dir is not this one, "
                         f"run this command there")
        elif not alive(info["pid"]):
            notes.append(f"rank {rank} (pid {info['pid']}) is not running")
        elif request.native:
            notes.append(f"rank {rank}: {_native(directory, rank, info['pid'])}")
    wait_for_dumps(directory, max(ranks) + 1, started, request.wait_s)
    lines = [f"stacks of the job in {request.run_dir}, on request (files in {directory}):"]
    lines += summary(directory, max(ranks) + 1) + notes
    return "\n".join(lines) + "\n"
