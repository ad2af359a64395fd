"""`python -m launch.guard`: ends the launcher's children when the launcher dies
without ending them itself (SIGKILL, the OOM killer). Standard library only.

launch/__main__.py starts the guard before its first child, in a session of its own,
with a pipe on its stdin, and writes one line per event:
    group PGID    a child was started as the leader of process group PGID
    exited PGID   that child has ended and was reaped (its id may be reused)
    done          every child has ended: nothing to do
EOF without 'done' means the launcher died. Then the guard sends SIGTERM to every live
group and to every process below them that lives in another group (horovodrun, mpirun
and our ranks stop in order, a checkpoint included), waits GRACE_S, and SIGKILLs what
is left. Without the second part a horovodrun job outlived the guard by Horovod's own
two 5 s graces (its rank launchers setsid, so the guard's signals never reached them).

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


def process_table(proc: str = "/proc") -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process that still runs (zombies
    excluded: an orphan's zombie may wait long for init, and a signal cannot end it)."""
    table = {}
    for pid in filter(str.isdigit, os.listdir(proc)):
        try:
            with open(f"{proc}/{pid}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()  # after the command name
        except OSError:
            continue  # ended between the listing and the read
        if len(fields) > 2 and fields[0] != "Z":
            table[int(pid)] = (int(fields[1]), int(fields[2]))
    return table


def live_members(pgid: int, proc: str = "/proc", table=None) -> list[int]:
    """Processes of group `pgid` that still run."""
    table = process_table(proc) if table is None else table
    return sorted(pid for pid, (_, group) in table.items() if group == pgid)


def strays(groups, table) -> set[int]:
    """Descendants of the groups' members that live outside those groups. horovodrun's
    rank launchers call setsid, so a signal to horovodrun's group never reaches them or
    the ranks under them, and once horovodrun is gone nothing links them to it: they
    are found while the tree is whole, and signalled one by one."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    todo = [pid for pid, (_, group) in table.items() if group in groups]
    found: set[int] = set()
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if table[pid][1] not in groups}


def _signal(groups, pids, sig) -> None:
    for send, ids in ((os.killpg, groups), (os.kill, pids)):
        for target in ids:
            try:
                send(target, sig)
            except OSError:
                pass  # it has ended meanwhile


def sweep(groups, grace_s: float = GRACE_S, table=process_table, clock=time.monotonic,
          sleep=time.sleep) -> set[int]:
    """SIGTERM every group that still runs and every stray below it, SIGKILL what is
    left after grace_s; returns the groups that had to be SIGKILLed."""
    snapshot = table()
    alive = {pgid for pgid in groups if live_members(pgid, table=snapshot)}
    stray = strays(alive, snapshot)
    _signal(alive, stray, signal.SIGTERM)
    deadline = clock() + grace_s
    while (alive or stray) and clock() < deadline:
        sleep(POLL_S)
        snapshot = table()
        new = strays(alive, snapshot) - stray  # started since: a late rank launcher
        _signal((), new, signal.SIGTERM)
        stray = {pid for pid in stray | new if pid in snapshot}
        alive = {pgid for pgid in alive if live_members(pgid, table=snapshot)}
    _signal(alive, stray, signal.SIGKILL)
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
