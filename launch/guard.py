"""`python -m launch.guard`: ends the launcher's children when the launcher dies
without ending them itself (SIGKILL, the OOM killer). Standard library only.

launch/__main__.py starts the guard before its first child, in a session of its own,
with a pipe on its stdin, and writes one line per event:
    group PGID    a child was started as the leader of process group PGID
    exited PGID   that child has ended and was reaped (its id may be reused)
    done          every child has ended: nothing to do
EOF without 'done' means the launcher died. Then the guard sends SIGTERM to every live
group (horovodrun, mpirun and our ranks stop in order, a checkpoint included), waits
GRACE_S, and SIGKILLs what is left.

Each child also gets PR_SET_PDEATHSIG (SIGTERM) from the kernel, which works even if
the guard is killed too. The guard covers what that cannot: a child's own children
(horovodrun --mpi runs mpirun under /bin/sh, and dash does not exec it, so the
SIGTERM ends the shell and orphans mpirun in the same group) and a child that
ignores SIGTERM or is slow to act on it.
"""
import os
import signal
import sys
import time

GRACE_S = 5.0   # after SIGTERM; a SIGKILLed launcher's job gets less than a stopped one's
POLL_S = 0.1


def read_orders(lines) -> tuple[set[int], bool]:
    """(groups still to guard, whether the launcher said 'done'); reads until EOF."""
    groups: set[int] = set()
    for line in lines:
        word, _, number = line.strip().partition(" ")
        if word == "done":
            return groups, True
        if number.isdigit() and word == "group":
            groups.add(int(number))
        elif number.isdigit() and word == "exited":
            groups.discard(int(number))
    return groups, False


def live_members(pgid: int, proc: str = "/proc") -> list[int]:
    """Processes of group `pgid` that still run (zombies excluded: an orphan's zombie
    may wait long for init, and a signal cannot end it anyway)."""
    members = []
    for pid in filter(str.isdigit, os.listdir(proc)):
        try:
            with open(f"{proc}/{pid}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()  # after the command name
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(pid))
    return members


def _signal_groups(groups, sig) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass  # the group has ended meanwhile


def sweep(groups, grace_s: float = GRACE_S, members=live_members, clock=time.monotonic,
          sleep=time.sleep) -> set[int]:
    """SIGTERM every group that still runs, SIGKILL those left after grace_s; returns
    the groups that had to be SIGKILLed."""
    alive = {pgid for pgid in groups if members(pgid)}
    _signal_groups(alive, signal.SIGTERM)
    deadline = clock() + grace_s
    while alive and clock() < deadline:
        sleep(POLL_S)
        alive = {pgid for pgid in alive if members(pgid)}
    _signal_groups(alive, signal.SIGKILL)
    return alive


def main() -> int:
    # Ctrl-C and a closed terminal are the launcher's to handle; the guard only acts
    # when the launcher is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups, done = read_orders(sys.stdin)
    if not done and groups:
        killed = sweep(groups)
        print(f"python -m launch: the launcher died; its jobs were stopped (SIGTERM"
              f"{', then SIGKILL for process group(s) ' + str(sorted(killed)) if killed else ''})",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
