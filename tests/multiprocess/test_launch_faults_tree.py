"""Issue 17 item 6: `python -m launch run` SIGKILLed mid-training takes its whole tree
with it (horovodrun or mpirun, their helpers, every rank), instead of leaving the job
training with nobody to stop it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT, child_env
from ranks import kill_tree, process_tree, still_running

TRAINING = [sys.executable, "-m", "horovod_train", "--epochs=1000", "--max_steps=1000000",
            "--log_every=5", "--eval_every_epochs=0"]
BOUND_S = 12  # the guard SIGKILLs every process of the tree ~5 s after the launcher died


def _ranks(tree) -> list[int]:
    found = []
    for pid in tree:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"horovod_train" in argv and not any(a.endswith(b"horovodrun") for a in argv):
            found.append(pid)
    return found


def _wait_for_training(launcher, log, timeout=300):
    deadline = time.monotonic() + timeout
    while "train | step" not in log.read_text():
        assert launcher.poll() is None, f"the job ended first:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no training step logged:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


@pytest.mark.parametrize("launch_flags", [
    ["-H", "localhost:2"],                          # horovodrun --gloo
    ["-H", "localhost:2", "--controller", "mpi"],   # horovodrun --mpi: sh, then mpirun
    ["-H", "localhost:2", "--backend", "mwms"],     # two TF_CONFIG workers, started directly
], ids=["horovodrun-gloo", "horovodrun-mpi", "mwms-local"])
def test_sigkilled_launcher_leaves_no_process_of_its_tree(tmp_path, launch_flags):
    if "mpi" in launch_flags or "--backend" not in launch_flags:
        pytest.importorskip("horovod.tensorflow")
    log = tmp_path / "job.log"
    with open(log, "w") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "launch", "run", *launch_flags,
                                     "--", *TRAINING], cwd=ROOT, env=child_env(),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    tree = {}
    try:
        _wait_for_training(launcher, log)
        tree = process_tree(launcher.pid)  # recorded by pid and start time before the kill
        assert len(_ranks(tree)) >= 2, tree
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        killed_at = time.monotonic()
        while still_running(tree) and time.monotonic() - killed_at < BOUND_S:
            time.sleep(0.2)
        left = still_running(tree)
        print(f"\n[launch faults] {' '.join(launch_flags)}: {len(tree)} processes, all gone "
              f"{time.monotonic() - killed_at:.1f} s after the launcher's SIGKILL" if not left
              else "")
        assert not left, (f"{len(left)} of {len(tree)} processes still running {BOUND_S} s "
                          f"after the launcher's SIGKILL: {left}\n{log.read_text()[-3000:]}")
    finally:
        kill_tree(tree)
        if launcher.poll() is None:
            launcher.kill()
