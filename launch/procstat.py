"""A process's start time, read from /proc: with its pid, what tells it from every later
process given the same number. Standard library only, like all of launch/; the one
reading of /proc/PID/stat for launch stacks (is a pid still the rank?) and the ranks'
local_peers (has a peer on this host ended?)."""


def start_time(pid, proc: str = "/proc") -> int | None:
    """Clock ticks after boot at which `pid` started (/proc/PID/stat's 22nd field), or None
    when it is gone or has ended: a zombie keeps its pid and start time until reaped."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            line = f.read()
    except OSError:
        return None  # gone, or not ours to read
    # After the command name in parentheses, which may hold anything: field 3 onwards.
    fields = line.rpartition(b")")[2].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])
