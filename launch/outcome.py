"""How a job ended, from the lines its launcher prints, in the trainer's exit codes
(issue 55, item 6). Pure: launch/__main__.py feeds it the lines it passes on.

The trainer's codes are a contract (README, exit codes): 2 bad input, 3 diverged, 4 the
ranks differ, 75 a peer was lost (relaunch resumes), 143 stopped on SIGTERM after a
checkpoint. The launchers do not keep it: horovodrun --gloo exits 1 whatever its ranks
exited with, and mpirun (also under horovodrun --mpi) with the first failing rank's raw
status, 137 after a SIGKILL. Both name that rank and its status, and so `python -m
launch run` ends with the rank's own code, or 75 for a rank the kernel killed
(kill -9, the OOM killer, a host going down): the others lost a peer, and the same
command again resumes from the newest checkpoint.
"""
import re
import signal
from dataclasses import dataclass

EXIT_PEER_LOST = 75  # the trainer's code (horovod_train/watchdog.py) for a lost peer
KILLED = 128 + signal.SIGKILL  # what shells and launchers report for a SIGKILLed rank

# The first rank to fail, as each launcher reports it (its own tag-free lines):
# horovodrun --gloo: "Process 1 exit with status code 137." (a shell's 128+N for signal N);
# mpirun: "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9".
_GLOO = re.compile(r"^Process (\d+) exit with status code (\d+)\.")
_MPIRUN_SIGNAL = re.compile(r"^mpirun noticed that process rank (\d+) with PID \d+ on node "
                            r"\S+ exited on signal (\d+)")


@dataclass(frozen=True)
class Failure:
    rank: int
    code: int  # the rank's exit status, 128 + N when signal N ended it


def failure_in(line: str) -> Failure | None:
    """The failing rank a launcher's line names, or None (a status 0 is no failure)."""
    text = line.strip()
    found = _GLOO.match(text)
    if found and int(found.group(2)) != 0:
        return Failure(int(found.group(1)), int(found.group(2)))
    found = _MPIRUN_SIGNAL.match(text)
    if found:
        return Failure(int(found.group(1)), 128 + int(found.group(2)))
    return None


def job_exit(launcher_code: int, first: Failure | None) -> tuple[int, str | None]:
    """(the job's exit code, a line to print or None) from the launcher's own code and the
    first rank it named as failing."""
    if launcher_code == 0 or first is None:
        return launcher_code, None
    if first.code == KILLED:
        return EXIT_PEER_LOST, (
            f"rank {first.rank} was killed (signal {signal.SIGKILL}: kill -9, the OOM killer, "
            f"its host going down) and the launcher ended the job, exit {launcher_code}: a "
            f"peer was lost (exit {EXIT_PEER_LOST}). Relaunch the same command to resume from "
            f"the newest checkpoint in --checkpoint_dir")
    # Any other status is the rank's own (its line says why) or a signal's (128 + N):
    # passed on as it is, so 2, 3, 4, 75 and 143 keep their meaning under every launcher.
    return first.code, None
