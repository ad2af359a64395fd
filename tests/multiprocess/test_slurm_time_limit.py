"""Issue 45 item 3 on a real Slurm (scripts/slurm_local.sh, one node): a job that reaches
its time limit writes its checkpoint before it, thanks to the early signal the rendered
script asks for (#SBATCH --signal=TERM@N), and the same script submitted again resumes
there and finishes.

The job is rendered with --time 00:10:00; once it has trained past its first checkpoint,
`scontrol update TimeLimit=1` brings its limit down to one minute of run time, so the
test takes about a minute and a half rather than ten. N is 35 s (--stop_grace_s 20 +
15 s). slurmctld tests time limits every 30 s (PERIODIC_TIMEOUT in its source, a
build-time constant: no slurm.conf setting changes it) and sends the signal at the
first test that finds the end within N + 30 s (sbatch: up to 60 s early); with a
one-minute limit that is the first test after the update, 0-30 s after it, and the
limit itself is enforced no sooner than the test after that. The ranks stop at a step
boundary, the chief writes a checkpoint, and they exit 143 before Slurm would cancel
the job "DUE TO TIME LIMIT" (which the output must therefore not say).
"""
import json
import sys
import time

import slurm_fixture
from helpers import run_cli
# The one-node cluster fixture and the job helpers of the Slurm scenarios (issue 42's).
from test_slurm_local import ACTIVE, STOPPED, _steps, one_node  # noqa: F401

# digits_cnn on one rank, held to at most 20 steps/s by a 50 ms delay before each step, so
# the step count is a lower bound on the run's seconds: STEPS = 46 s of training. The
# first job trains ~2 s to its first checkpoint, then at most ~33 s more (the update,
# up to 31 s to slurmctld's next test, the signal's delivery): 35 s = 700 steps, so it
# cannot finish first (10 s of margin); the resumed job trains the rest.
STEP_DELAY_S = 0.05
STEPS = 920
FLAGS = [f"--max_steps={STEPS}", "--epochs=1000", "--checkpoint_every=40", "--batch_size=32",
         "--optimizer=sgd", "--learning_rate=0.05", "--intra_op_threads=1",
         "--eval_every_epochs=0", "--log_every=40", "--stop_grace_s=20",
         f"--inject_delay=step:{STEP_DELAY_S}@0"]
SIGNAL_S = 35  # --stop_grace_s 20 + 15 s to exit (launch/sbatch.py, signal_seconds)
JOB_TIMEOUT_S = 300


def _wait(what: str, condition, tmp_path, timeout=JOB_TIMEOUT_S) -> float:
    """Seconds until `condition` held; fails with the job's output at the timeout."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, \
            f"no {what} within {timeout} s:\n{slurm_fixture.job_output(tmp_path)}"
        time.sleep(0.5)
    return time.monotonic() - started


def _over(cluster, job_id: str, cwd) -> bool:
    """Whether the job has ended: squeue shows it in none of the active states, or no
    longer knows it. SIGNALING is active too: squeue shows it for the moment slurmctld
    delivers the early signal, and reading the output then caught the job mid-stop."""
    proc = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"], cwd=cwd, timeout=60)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:  # purged after MinJobAge: it has ended
            return True
        print(f"squeue failed ({proc.returncode}), asking again: {proc.stderr.strip()}")
        return False
    return proc.stdout.strip() not in ACTIVE

def test_a_job_at_its_time_limit_checkpoints_early_and_the_same_script_resumes(
        one_node, tmp_path):
    ckpt, summary = tmp_path / "ckpt", tmp_path / "summary.json"
    script = tmp_path / "job.sbatch"
    rendered = run_cli([sys.executable, "-m", "launch", "slurm", "--nodes", "1",
                        "--tasks_per_node", "1", "--time", "00:10:00", "-o", str(script), "--",
                        sys.executable, "-m", "horovod_train", *FLAGS,
                        f"--checkpoint_dir={ckpt}", f"--summary_json={summary}"])
    assert rendered.returncode == 0, rendered.stderr
    assert f"#SBATCH --signal=TERM@{SIGNAL_S}\n" in script.read_text()

    submitted = one_node.run(["sbatch", "--parsable", str(script)], cwd=tmp_path, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    first = submitted.stdout.strip().split(";")[0]
    try:
        _wait("first checkpoint", lambda: _steps(ckpt), tmp_path)
        limited = one_node.run(["scontrol", "update", f"JobId={first}", "TimeLimit=1"],
                               cwd=tmp_path, timeout=60)
        assert limited.returncode == 0, limited.stderr
        ended_s = _wait("end of the time-limited job",
                        lambda: _over(one_node, first, tmp_path), tmp_path)
    finally:
        one_node.run(["scancel", first], cwd=tmp_path, timeout=60)
    print(f"time-limited job ended {ended_s:.0f} s after its limit became 1 minute")

    text = (tmp_path / f"horovod_train-{first}.out").read_text()
    stops = STOPPED.findall(text)
    assert len(stops) == 1, text[-4000:]
    stopped = int(stops[0])
    assert 0 < stopped < STEPS and _steps(ckpt)[-1] == stopped, (stopped, _steps(ckpt))
    assert "Exited with exit code 143" in text, text[-4000:]
    # The early signal, not the limit, stopped it: Slurm never had to cancel the job.
    assert "DUE TO TIME LIMIT" not in text, text[-4000:]
    assert not summary.exists()  # a stopped run writes no summary: it is not over

    again = one_node.run(["sbatch", "--wait", str(script)], cwd=tmp_path, timeout=JOB_TIMEOUT_S)
    assert again.returncode == 0, f"{again.stderr}\n{slurm_fixture.job_output(tmp_path)}"
    second = again.stdout.split()[-1]
    lines = (tmp_path / f"horovod_train-{second}.out").read_text().splitlines()
    assert f"checkpoint | resumed from step {stopped}" in lines, lines[-40:]
    assert any(line.startswith(f"done  | steps {STEPS} ") for line in lines), lines[-40:]
    result = json.loads(summary.read_text())
    assert result["steps"] == STEPS and result["resumed"]["step"] == stopped, result
