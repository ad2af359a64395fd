"""Checkpoint directories under real processes (issue 17): prune keeps the readable
checkpoints, a second job on the same directory is refused while the first finishes
intact, a resume whose global batch this launch cannot keep is refused by every rank,
then continued when the change is allowed (test_resume_resized.py: the kept ones), and
(issue 42) a chief SIGKILLed while it writes on a filesystem without atomic rename
leaves only whole checkpoints, the newest of which its relaunch resumes from."""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from helpers import child_env, run_cli
from horovod_train import checkpoint, fs
from horovod_train import checkpoint_commit as commit
from ranks import TRAIN, horovodrun, start_job

WHOLE = ["COMMIT", "meta.json", "state.npz"]  # a committed checkpoint's files (issue 42)
SMALL = ["--backend=local", "--intra_op_threads=1", "--eval_every_epochs=0", "--log_every=10",
         "--checkpoint_every=10"]


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "horovod_train: error:" in line]


def _wait_for_flock(proc, timeout: float = 300):
    """Until `proc` holds a flock (the checkpoint directory's writer lock; /proc/locks
    lists each holder's pid); fails early if it ends first."""
    deadline = time.monotonic() + timeout
    while True:
        with open("/proc/locks") as locks:
            if any(line.split()[1:2] == ["FLOCK"] and line.split()[4:5] == [str(proc.pid)]
                   for line in locks):
                return
        assert proc.poll() is None, f"job ended ({proc.returncode}) before taking its lock"
        assert time.monotonic() < deadline, f"no lock taken within {timeout} s"
        time.sleep(0.02)


def _ckpts(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("ckpt-"))


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """One process, 30 steps, --keep_checkpoints=2, in a directory that already holds
    two dirs that only look like checkpoints (the issue's repro). Its step-30 checkpoint
    (1 rank x batch 32) is also the one the global-batch test resumes from."""
    ck = tmp_path_factory.mktemp("pruned") / "CK"
    for step in (900, 800):
        (ck / f"ckpt-000000{step}").mkdir(parents=True)
        (ck / f"ckpt-000000{step}" / "meta.json").write_text("x\n")
    proc = run_cli(TRAIN + SMALL + ["--max_steps=30", "--keep_checkpoints=2",
                                    f"--checkpoint_dir={ck}"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ck, proc


def test_prune_keeps_the_readable_checkpoints_next_to_garbage(pruned):
    ck, proc = pruned
    assert _ckpts(ck) == ["ckpt-000000020", "ckpt-000000030",
                          "ckpt-000000800", "ckpt-000000900"]
    assert (ck / "ckpt-000000900" / "meta.json").read_text() == "x\n"
    assert all(sorted(os.listdir(ck / n)) == WHOLE for n in ("ckpt-000000020", "ckpt-000000030"))
    assert not [n for n in os.listdir(ck) if n.startswith((".partial", ".pruning"))]
    warned = [line for line in proc.stderr.splitlines() if "--keep_checkpoints" in line]
    assert len(warned) == 1 and "ckpt-000000900" in warned[0] and "ckpt-000000800" in warned[0]


def test_a_second_job_on_the_same_dir_is_refused_and_the_first_finishes(tmp_path):
    ck = tmp_path / "CK"
    args = SMALL + ["--keep_checkpoints=2", f"--checkpoint_dir={ck}"]
    first = start_job(TRAIN + args + ["--max_steps=100"], "ckpt-writer-1", SLURM_JOB_ID="4242")
    try:
        # Paused while it holds the directory's lock (a checkpoint it wrote may already be
        # pruned: 100 steps take 2 s on a fast host), so the second job surely meets it.
        _wait_for_flock(first)
        os.killpg(first.pid, signal.SIGSTOP)
        before = sorted(os.listdir(ck))
        second = run_cli(TRAIN + args + ["--max_steps=30"], timeout=300)
        assert sorted(os.listdir(ck)) == before  # the refused job wrote nothing there
        os.killpg(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert second.returncode == 2, second.stderr[-3000:]
    lines = _error_lines(second.stderr)
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert f"pid {first.pid}" in lines[0] and "SLURM_JOB_ID=4242" in lines[0]
    assert os.uname().nodename in lines[0] and "Fix: give each job its own" in lines[0]
    assert first.returncode == 0, out[-3000:]
    assert "free space" not in out and "done  | steps 100" in out
    assert _ckpts(ck) == ["ckpt-000000090", "ckpt-000000100"]
    assert all(sorted(os.listdir(ck / n)) == WHOLE for n in _ckpts(ck))


# The flags of every 2-rank launch on the global-batch test's directory (global batch 64).
TWO_RANKS = ["--intra_op_threads=1", "--eval_every_epochs=0", "--checkpoint_every=10"]


@pytest.fixture(scope="module")
def batch_change(pruned, tmp_path_factory):
    """2 Gloo ranks x batch 32 on the 1-process run's step-30 checkpoint (global batch
    32): refused, then allowed with --allow_global_batch_change up to step 40. Its
    checkpoints (global batch 64) are also what the stuck-write test resumes from."""
    base = tmp_path_factory.mktemp("batch_change")
    ck = base / "CK"
    shutil.copytree(pruned[0] / "ckpt-000000030", ck / "ckpt-000000030")
    common = TWO_RANKS + ["--max_steps=40", f"--checkpoint_dir={ck}"]
    refused = run_cli(horovodrun(2, "gloo", common), timeout=300)
    after_refusal = _ckpts(ck)
    allowed = run_cli(horovodrun(2, "gloo", common + ["--allow_global_batch_change",
                                                      f"--summary_json={base}/s.json"]),
                      timeout=300)
    return {"ck": ck, "refused": refused, "after_refusal": after_refusal,
            "allowed": allowed, "summary": base / "s.json"}


def test_a_global_batch_that_cannot_be_kept_is_refused_by_every_rank_unless_allowed(
        batch_change):
    """The checkpoint is the prune test's step-30 one (1 rank x batch 32, global batch
    32); until issue 64 a 20-step run of its own wrote one alike."""
    ck, two = batch_change["ck"], batch_change["refused"]
    # 1 rank x batch 32 wrote it; 2 ranks x batch 32 make 64, and no accumulation makes 32.
    output = two.stdout + two.stderr
    # horovodrun ends with its own status 1 and names the first rank's code, 2.
    assert two.returncode != 0 and "Exit code: 2" in output, output[-4000:]
    lines = _error_lines(output)
    assert sorted(line.split(">", 1)[0] for line in lines) == ["[0]<stderr", "[1]<stderr"], lines
    assert len({line.split(":", 1)[1] for line in lines}) == 1  # the same line on both ranks
    assert "step 30 was written with global batch 32 (1 rank x batch 32 x accumulation 1)" \
        in lines[0] and "this launch has 2 ranks x batch 32" in lines[0]
    assert "--batch_size in {1, 2, 4, 8, 16} on 2 ranks" in lines[0]
    assert "Fix: relaunch so, or pass --allow_global_batch_change" in lines[0]
    assert "resumed from step" not in output
    assert batch_change["after_refusal"] == ["ckpt-000000030"]  # nothing written

    allowed = batch_change["allowed"]
    assert allowed.returncode == 0, allowed.stderr[-4000:]
    resumed = json.loads(batch_change["summary"].read_text())["resumed"]
    assert resumed["step"] == 30 and "global batch 32 -> 64 (--allow_global_batch_change), " \
        "learning rate x2 (linear in the global batch), warmup not repeated" in resumed["change"]
    with open(ck / "ckpt-000000040" / "meta.json") as f:
        assert json.load(f)["lr_schedule"]["scale"] == 2.0  # 1 x 64/32: the new global batch


def _marked(directory) -> list[str]:
    return [n for n in _ckpts(directory) if os.path.exists(directory / n / commit.MARKER)]


def _wait(condition, job, timeout: float, poll: float):
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.poll() is None, f"the job ended ({job.returncode}) first"
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(poll)


def test_a_chief_killed_mid_write_without_atomic_rename_leaves_whole_checkpoints(
        tmp_path, monkeypatch):
    """One process, a checkpoint every step, local paths counted as not renaming atomically
    (as gs:// or s3://: files under the final name, COMMIT last), killed once it has
    committed a few, the moment a write is seen under way: mostly mid-write, at whichever
    point (each point of a write is killed for sure in tests/unit/test_checkpoint_commit.py)."""
    monkeypatch.setenv(fs.NO_ATOMIC_RENAME_ENV, "1")  # this process reads as the job wrote
    ck = tmp_path / "CK"
    ck.mkdir()
    args = TRAIN + SMALL + ["--checkpoint_every=1", "--keep_checkpoints=3", f"--checkpoint_dir={ck}"]
    job = start_job(args + ["--epochs=1000", "--max_steps=100000"], "ckpt-non-atomic")
    try:
        _wait(lambda: any(commit.step_of(n) >= 5 for n in _marked(ck)), job, 300, 0.01)
        _wait(lambda: _marked(ck) != _ckpts(ck), job, 60, 0.001)  # a write (or prune) under way
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
    committed = []
    for step, path in checkpoint.list_checkpoints(str(ck)):
        if commit.inspect(path).why_not is None:
            with np.load(os.path.join(path, commit.STATE)) as state:  # each array's CRC-32
                assert all(np.all(np.isfinite(state[name])) for name in state.files)
            committed.append(step)
    assert committed and committed[0] >= 5, sorted(os.listdir(ck))
    cut = {n: sorted(os.listdir(ck / n)) for n in _ckpts(ck) if commit.step_of(n) not in committed}
    print(f"\n[fault figures] chief killed after step {committed[0]}'s commit; cut short: {cut}")
    done = run_cli(args + [f"--max_steps={committed[0] + 3}"], timeout=300,
                   env=child_env(**{fs.NO_ATOMIC_RENAME_ENV: "1"}))
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(rf"resumed from step {committed[0]}\b", done.stderr), done.stderr[-3000:]
    assert _ckpts(ck) == [commit.name(committed[0] + n) for n in (1, 2, 3)]
    assert all(sorted(os.listdir(ck / n)) == WHOLE for n in _ckpts(ck))


def _bounded(job, timeout: float) -> str:
    """`job`'s output once it ended; killed (its whole group) and failed past `timeout`."""
    try:
        out, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, _ = job.communicate()
        pytest.fail(f"still running after {timeout} s; its output:\n{out[-3000:]}")
    return out


def test_a_checkpoint_write_that_never_ends_is_bounded_and_the_relaunch_resumes(
        tmp_path, batch_change):
    """Issue 55 item 3: a write that never ends (--inject_delay=checkpoint:600@0, a stuck
    mount) kept every rank alive in its rounds, in silence, forever. Now the chief says it
    is still writing, and past --checkpoint_timeout_s every rank ends with one line naming
    the write and its path, exit 75; the relaunch resumes from the committed checkpoint
    before it. Its own launches: the write must outlast its bound, which no other
    scenario's flags may (test_local_phases.py's slow writes must end well), and there
    must be a committed checkpoint first at the same global batch (64): the global-batch
    test's allowed relaunch wrote step 40's (until issue 64, a 1-process run of this test's
    own wrote step 10's). The bound, 9 s, is past the first "still writing" line (8 s: a
    line every collective bound) and ends the job at its 5th 2 s round."""
    assert batch_change["allowed"].returncode == 0, batch_change["allowed"].stderr[-4000:]
    ck = tmp_path / "CK"
    shutil.copytree(batch_change["ck"], ck)
    common = TWO_RANKS + ["--log_every=10", "--max_steps=50", "--collective_timeout_s=8",
                          f"--checkpoint_dir={ck}"]
    started = time.monotonic()
    output = _bounded(start_job(horovodrun(2, "gloo", common + [
        "--inject_delay=checkpoint:600@0", "--checkpoint_timeout_s=9"]), "ckpt-stuck"), 240)
    print(f"\n[checkpoint bound] a write stuck for 600 s ended the job in "
          f"{time.monotonic() - started:.0f} s")
    assert "Process 0 exit with status code 75" in output, output[-4000:]
    path = os.path.join(str(ck), commit.name(50))
    stopped = sorted(line for line in output.splitlines() if "horovod_train: stopped:" in line)
    assert [line.split(">", 1)[0] for line in stopped] == ["[0]<stderr", "[1]<stderr"], \
        output[-4000:]
    for rank, line in enumerate(stopped):
        assert f"rank {rank}: the chief's checkpoint write of step 50 to {path} has not ended " \
               f"after 10 s (limit 9 s: --checkpoint_timeout_s" in line, line
    # Every 8 s (the collective bound) while it runs long, as a long evaluation does.
    assert f"checkpoint | still writing {path} after 8 s" in output, output[-4000:]
    assert "peer" not in output
    assert sorted(s for s, p in checkpoint.list_checkpoints(str(ck))
                  if commit.inspect(p).why_not is None) == [30, 40]

    again = run_cli(horovodrun(2, "gloo", common), timeout=300)  # the same, without the delay
    assert again.returncode == 0, again.stderr[-4000:]
    assert "resumed from step 40" in again.stdout + again.stderr
    assert _marked(ck) == ["ckpt-000000030", "ckpt-000000040", "ckpt-000000050"]
