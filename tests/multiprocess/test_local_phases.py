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
# The first epoch and 3 steps of the second: an evaluation at the first epoch's end with
# training after it, and the final one. digits (1437 examples), batch 32: 44 steps an
# epoch on 1 process, 22 on 2 ranks.
SHORT = ["--epochs=2", "--log_every=10", "--eval_every_epochs=1"]

pytestmark = pytest.mark.slow


def test_one_process_evaluation_longer_than_the_timeout_ends_well(tmp_path):
    """The reported run in miniature: 1 process, its evaluation longer than
    --collective_timeout_s. It ended with exit 75 and a peer message; there is no peer."""
    summary = tmp_path / "summary.json"
    proc = run_cli(TRAIN + SHORT + ["--max_steps=47", "--collective_timeout_s=2",
                                    "--inject_delay=eval:5@0", f"--summary_json={summary}"],
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "peer" not in proc.stderr and "watchdog" not in proc.stderr
    result = json.loads(summary.read_text())
    assert result["test_accuracy"] >= 0.9
    assert [step for step, _ in result["accuracy_history"]] == [44, 47]  # both evaluations
    # The long phase shows its progress instead.
    assert re.search(r"eval  \| .*still evaluating", proc.stderr), proc.stderr[-3000:]


def test_slow_evaluation_and_checkpoint_write_on_one_rank_of_two(tmp_path):
    """Rank 1 evaluates 6 s longer each time and rank 0 writes each checkpoint 6 s
    longer, against a 3 s bound: both end 0, with the right accuracy, identical. Two of
    each, as before issue 64 (then over 44 steps): a write at step 20 and an evaluation
    at the epoch's end (22), each with training after it, and the final ones (25)."""
    pytest.importorskip("horovod.tensorflow")
    summary = run_ranks(horovodrun(2, "gloo", SHORT + [
        "--max_steps=25", "--collective_timeout_s=3", "--inject_delay=eval:6@1,checkpoint:6@0",
        f"--checkpoint_dir={tmp_path}/ckpt", "--checkpoint_every=20"]), tmp_path)
    assert summary["test_accuracy"] >= 0.9
    assert [step for step, _ in summary["accuracy_history"]] == [22, 25]
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["ckpt-000000020", "ckpt-000000025"]
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


def test_a_chief_stopped_mid_write_says_it_was_itself_stopped(tmp_path):
    """Issue 55 items 5 and 9: the chief SIGSTOPped in its checkpoint write's rounds, then
    SIGCONTed after the bound, said "a peer rank has died or stalled". Its own watchdog
    now sees its clock jump and says this rank itself was stopped; the peer names rank 0
    and where it waited. Two MWMS workers started by hand: under horovodrun the launcher
    ends the stopped rank when its peer exits, before it can speak (test_faults.py stops
    rank 1 there); no other scenario stops the chief, so this is its own launch."""
    ports = free_ports(2)
    flags = ["--max_steps=20", "--log_every=5", "--eval_every_epochs=0", "--intra_op_threads=1",
             "--collective_timeout_s=6", "--checkpoint_every=20", "--inject_delay=checkpoint:30@0",
             f"--checkpoint_dir={tmp_path}/ck"]
    procs = [subprocess.Popen(TRAIN + flags, cwd=ROOT, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=child_env(TF_CONFIG=tf_config(ports, i)))
             for i in range(2)]
    try:
        out0 = []
        deadline = time.monotonic() + 300
        for line in procs[0].stdout:  # in the write's rounds (30 s long), 6 s into it
            out0.append(line)
            if "checkpoint | still writing" in line:
                break
            assert time.monotonic() < deadline, "".join(out0)[-3000:]
        os.kill(procs[0].pid, signal.SIGSTOP)
        time.sleep(12)  # twice the bound: the peer's watchdog ends it meanwhile
        os.kill(procs[0].pid, signal.SIGCONT)
        texts = ["".join(out0) + procs[0].communicate(timeout=120)[0],
                 procs[1].communicate(timeout=120)[0]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [75, 75], texts[0][-3000:] + texts[1][-3000:]
    stopped = [[line for line in text.splitlines() if "horovod_train: stopped:" in line]
               for text in texts]
    assert len(stopped[0]) == 1 and len(stopped[1]) == 1, stopped
    assert re.search(r"rank 0: .*; this rank itself was stopped or stalled for 1\d s of that",
                     stopped[0][0]), stopped[0][0]
    assert "peer rank has died" not in stopped[0][0]
    assert "rank 1: no collective with the peers finished for 6 s" in stopped[1][0]
    assert "this rank waited in the checkpoint write's rounds (step 20) and rank 0, its peer, " \
           "has died or stalled" in stopped[1][0], stopped[1][0]
