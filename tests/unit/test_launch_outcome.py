"""Issue 55 item 6: `python -m launch run` ends with the trainer's exit codes, whatever
the launcher under it returns (horovodrun --gloo: 1 for any failed rank; mpirun: 137 for
a SIGKILLed one), and says in one line which rank was lost and that a relaunch resumes.

The launcher lines are the ones measured on this machine (docs/faults.md, exit codes per
launcher); the launch itself runs for real, with two workers that need no TensorFlow."""
import os
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, child_env
from launch import outcome
from launch.outcome import Failure

GLOO_KILLED = "Process 1 exit with status code 137."
MPIRUN_KILLED = ("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
                 "(Killed).")


@pytest.mark.parametrize("line, failure", [
    (GLOO_KILLED, Failure(1, 137)),
    ("Process 0 exit with status code 143.", Failure(0, 143)),
    ("Process 0 exit with status code 0.", None),          # a rank that finished
    (MPIRUN_KILLED, Failure(1, 137)),
    ("mpirun noticed that process rank 0 with PID 4242 on node n1 exited on signal 15 "
     "(Terminated).", Failure(0, 143)),
    ("[1,0]<stderr>:Process 1 exit with status code 137.", None),  # a rank's own output
    ("train | step 20/100 | loss 0.4", None),
])
def test_the_first_failing_rank_is_read_from_each_launchers_line(line, failure):
    assert outcome.failure_in(line + "\n") == failure


def test_a_killed_rank_is_a_lost_peer_and_any_other_code_is_the_ranks_own():
    code, line = outcome.job_exit(137, Failure(1, 137))
    assert code == 75
    assert line.startswith("rank 1 was killed (signal 9: kill -9, the OOM killer")
    assert "exit 137" in line and "Relaunch the same command to resume from the newest " \
        "checkpoint" in line
    assert outcome.job_exit(1, Failure(1, 2)) == (2, None)      # gloo's 1 for bad data
    assert outcome.job_exit(1, Failure(1, 143)) == (143, None)  # gloo's 1 for a stop
    assert outcome.job_exit(143, None) == (143, None)           # no rank named
    assert outcome.job_exit(0, Failure(1, 137)) == (0, None)


# Worker 1 kills itself once worker 0 has said it runs (a file): SIGKILL, as kill -9 or
# the OOM killer; worker 0 waits, as a rank blocked in a collective would.
WORKER = ("import json, os, signal, sys, time; "
          "index = json.loads(os.environ['TF_CONFIG'])['task']['index']; "
          "print(f'worker {index} runs', flush=True); "
          "time.sleep(1) if index else None; "
          "os.kill(os.getpid(), signal.SIGKILL) if index else time.sleep(60)")


def test_launch_run_exits_75_naming_the_killed_rank():
    """Before: launch run returned the killed worker's 137, with no word of which rank or
    what to do."""
    proc = subprocess.run([sys.executable, "-m", "launch", "run", "--backend", "mwms",
                           "-H", "localhost:2", "--", sys.executable, "-c", WORKER],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
    assert "worker 0 runs" in proc.stdout and "worker 1 runs" in proc.stdout  # passed on
    assert proc.returncode == 75, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("python -m launch: ")]
    assert len(lines) == 1 and lines[0].startswith("python -m launch: rank 1 was killed "
                                                   "(signal 9"), proc.stderr
    assert "resume from the newest checkpoint" in lines[0]
