"""Issue 41 item 1: a phase without collectives (an evaluation, the chief's checkpoint
write) is never taken for a stall, on 1 process or on many, and a rank that dies in one
is still detected within the bound. The phases are made slow on purpose with
--inject_delay, against a small --collective_timeout_s."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import assert_ranks_identical, free_ports, horovodrun, rank_pid, run_ranks, tf_config

TRAIN = [sys.executable, "-m", "horovod_train"]
SHORT = ["--epochs=2", "--log_every=10", "--eval_every_epochs=1"]

pytestmark = pytest.mark.slow


def test_one_process_evaluation_longer_than_the_timeout_ends_well(tmp_path):
    """The reported run in miniature: 1 process, its evaluation longer than
    --collective_timeout_s. It ended with exit 75 and a peer message; there is no peer."""
    summary = tmp_path / "summary.json"
    proc = run_cli(TRAIN + SHORT + ["--collective_timeout_s=2", "--inject_delay=eval:5@0",
                                    f"--summary_json={summary}"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "peer" not in proc.stderr and "watchdog" not in proc.stderr
    assert json.loads(summary.read_text())["test_accuracy"] >= 0.9
    # The long phase shows its progress instead.
    assert re.search(r"eval  \| .*still evaluating", proc.stderr), proc.stderr[-3000:]


def test_slow_evaluation_and_checkpoint_write_on_one_rank_of_two(tmp_path):
    """Rank 1 evaluates 6 s longer each time and rank 0 writes each checkpoint 6 s
    longer, against a 3 s bound: both end 0, with the right accuracy, identical."""
    pytest.importorskip("horovod.tensorflow")
    summary = run_ranks(horovodrun(2, "gloo", SHORT + [
        "--collective_timeout_s=3", "--inject_delay=eval:6@1,checkpoint:6@0",
        f"--checkpoint_dir={tmp_path}/ckpt", "--checkpoint_every=40"]), tmp_path)
    assert summary["test_accuracy"] >= 0.9
    assert "peer" not in summary["_stderr"]
    assert_ranks_identical(summary, tmp_path, 2)


def test_a_rank_killed_during_evaluation_is_still_detected(tmp_path):
    """Two MWMS workers started by hand (no launcher ends the job for us): worker 1 is
    killed inside its slow final evaluation; worker 0 ends with exit 75 within the bound."""
    ports = free_ports(2)
    flags = ["--epochs=1", "--log_every=5", "--eval_every_epochs=0", "--collective_timeout_s=8",
             "--inject_delay=eval:120@1"]
    procs = [subprocess.Popen(TRAIN + flags, cwd=ROOT, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=child_env(TF_CONFIG=tf_config(ports, i), HT_TEST_TAG=str(tmp_path),
                                            HT_TEST_INDEX=str(i)))
             for i in range(2)]
    try:
        out0 = []
        deadline = time.monotonic() + 300
        for line in procs[0].stdout:  # the chief's last train line: worker 1 is evaluating
            out0.append(line)
            if re.search(r"train \| step (\d+)/\1 ", line):
                break
            assert time.monotonic() < deadline, "".join(out0)[-3000:]
        time.sleep(2)
        os.kill(rank_pid(str(tmp_path), 1), signal.SIGKILL)
        killed = time.monotonic()
        rest, _ = procs[0].communicate(timeout=120)
        waited = time.monotonic() - killed
        text = "".join(out0) + rest
        print(f"\n[local phases] worker 0 ended {waited:.1f} s after worker 1 was killed")
        assert procs[0].returncode == 75, text[-3000:]
        assert waited < 8 + 10, text[-3000:]  # the bound, plus a round and a poll
        assert "peer" in text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
