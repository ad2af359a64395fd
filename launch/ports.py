"""Ports for workers on this machine: bases outside the ephemeral range, and who holds
a port. Standard library only.

Linux gives every outgoing connection a source port from ip_local_port_range
(32768-60999 by default), and so does bind(port 0). A listening port drawn from that
range can be taken, between the moment it is chosen and the moment the worker binds
it, by any outgoing connection: MWMS peers connecting to each other during the
rendezvous did exactly that ("port 46418 ... is in use"). Ports below the range are
never handed out that way, so bases are picked there and probed free.
"""
import os
import random
import socket

from launch.errors import launch_error

EPHEMERAL_RANGE_PATH = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, when /proc cannot tell
LOWEST = 15000  # bases start here: clear of the well-known ports and common services
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def parse_port_range(text: str) -> tuple[int, int]:
    """'32768\\t60999' -> (32768, 60999); anything else -> Linux's default."""
    words = text.split()
    if len(words) == 2 and all(w.isdigit() for w in words) and int(words[0]) <= int(words[1]):
        return int(words[0]), int(words[1])
    return DEFAULT_EPHEMERAL


def read_ephemeral_range(path: str = EPHEMERAL_RANGE_PATH) -> tuple[int, int]:
    try:
        with open(path, encoding="ascii") as handle:
            return parse_port_range(handle.read())
    except OSError:
        return DEFAULT_EPHEMERAL


def overlaps_ephemeral(base: int, width: int, ephemeral: tuple[int, int]) -> bool:
    return base <= ephemeral[1] and base + width - 1 >= ephemeral[0]


def _candidates(width: int, ephemeral: tuple[int, int], lowest: int) -> range:
    below = range(lowest, ephemeral[0] - width + 1)
    # Only a range reaching down to `lowest` leaves no room below; then try above it.
    return below if len(below) else range(ephemeral[1] + 1, 65536 - width + 1)


def pick_port_base(width: int, ephemeral: tuple[int, int], is_free, start: int,
                   lowest: int = LOWEST) -> int:
    """The first base, scanning the candidates from index `start` (wrapping), whose
    ports base .. base+width-1 all lie outside `ephemeral` and pass is_free(port).
    Pure: the range and the probe are arguments."""
    bases = _candidates(width, ephemeral, lowest)
    for offset in range(len(bases)):
        base = bases[(start + offset) % len(bases)]
        if all(is_free(port) for port in range(base, base + width)):
            return base
    raise launch_error("ip_local_port_range", f"{ephemeral[0]} {ephemeral[1]}",
                       f"room outside it for {width} free consecutive ports",
                       "sysctl -w net.ipv4.ip_local_port_range='32768 60999'")


def port_is_free(port: int) -> bool:
    """Bindable the way the MWMS rendezvous binds it (all interfaces, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def free_port_base(width: int = 1) -> int:
    """A base for `width` local workers, below this machine's ephemeral range. The scan
    starts at a random place, so concurrent jobs rarely probe the same ports."""
    ephemeral = read_ephemeral_range()
    start = random.randrange(max(1, len(_candidates(width, ephemeral, LOWEST))))
    return pick_port_base(width, ephemeral, port_is_free, start=start)


# ----------------------------------------------------------------------------- holders

_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def _sockets(port: int, tables=_TCP_TABLES) -> list[tuple[str, str]]:
    """(state, inode) of the TCP sockets bound to local `port` (any address, any state)."""
    found = []
    for table in tables:
        try:
            with open(table, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # fields: sl local_address rem_address st ... uid timeout inode
            if len(fields) > 9 and int(fields[1].rpartition(":")[2], 16) == port:
                found.append((fields[3], fields[9]))
    return found


def _socket_inodes(port: int, tables=_TCP_TABLES) -> set[str]:
    # Inode 0 is TIME_WAIT, owned by no process.
    return {inode for _, inode in _sockets(port, tables) if inode != "0"}


def is_listened_on(port: int, tables=_TCP_TABLES) -> bool:
    """Whether a server listens on `port` on this machine (in this network namespace).
    Such a holder stays; an outgoing connection that drew the port as its source port
    (the only other way a free-looking port is taken) ends on its own."""
    return any(state == _LISTEN for state, _ in _sockets(port, tables))


def port_holder(port: int) -> str | None:
    """'pid 123 (python)' of a process holding a socket on `port`, best-effort: only
    processes whose /proc/PID/fd we may read, in this network namespace."""
    wanted = {f"socket:[{inode}]" for inode in _socket_inodes(port)}
    if not wanted:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in fds):
                with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                    return f"pid {pid} ({handle.read().strip()})"
        except OSError:
            continue
    return None
