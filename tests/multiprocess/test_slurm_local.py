"""Real Slurm on this machine (issue 21): the sbatch scripts `python -m launch slurm` renders,
srun, salloc and the launcher's Slurm forms, run as jobs of a cluster that
scripts/slurm_local.sh brings up (Debian's Slurm 22.05, munge, our own ports and state dir).

Every job trains digits_cnn for 30 steps on 2 ranks and is checked twice: the summary
(identical weight digests on every rank, equal to the exported weights; accuracy well
above chance), and what each rank saw of itself, rank, size, local rank and local size,
both as horovod_train.env detected it from the launcher's variables and as the backend
joined (slurm_rank_probe.py records them; the program itself reports no rank).

One scenario relaunches instead: a 2-node job requeued, then cancelled, each time after a
checkpoint, and its script submitted again on 1 node (issue 42, after a preemption).

One node: the cluster's node is this machine, under its own hostname. Two nodes: n1 and
n2, each slurmd in its own network namespace (tests/netns/topology.py), so ranks on
different nodes talk over veth links, as on separate hosts.
"""
import glob
import json
import math
import os
import re
import sys
import time

import pytest

import slurm_fixture
from helpers import ABSL_PREFIX, ROOT, run_cli
from launch.ports import free_port_base
from ranks import TRAIN, assert_ranks_identical, load_weights


STEPS = 30
FLAGS = [f"--max_steps={STEPS}", "--deterministic", "--optimizer=sgd", "--learning_rate=0.05",
         "--intra_op_threads=1", "--eval_every_epochs=0", "--log_every=10"]
JOB_TIMEOUT_S = 300
MIN_ACCURACY = 0.5  # 30 steps reach ~0.93 on digits; chance is 0.1


@pytest.fixture(scope="module")
def one_node():
    cluster = slurm_fixture.start(1)
    try:
        yield cluster
    finally:
        slurm_fixture.stop(cluster)


@pytest.fixture(scope="module")
def two_nodes():
    cluster = slurm_fixture.start(2)
    try:
        yield cluster
    finally:
        slurm_fixture.stop(cluster)


class Job:
    """Paths of one job: the submit dir (job output files land here), the run dir
    (summary, weights) and the probe dir (one record per rank)."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.run_dir = tmp_path / "run"
        self.probe_dir = tmp_path / "probe"
        self.run_dir.mkdir()
        self.probe_dir.mkdir()

    def train_argv(self) -> list[str]:
        return [sys.executable, slurm_fixture.PROBE, *FLAGS,
                f"--summary_json={self.run_dir}/summary.json",
                f"--export_weights={self.run_dir}/weights.npz"]

    def run(self, cluster, argv, timeout=JOB_TIMEOUT_S):
        proc = cluster.run(argv, cwd=self.dir, timeout=timeout, HT_PROBE_DIR=self.probe_dir)
        assert proc.returncode == 0, self.explain(f"{argv[0]} exited {proc.returncode}", proc)
        return proc

    def explain(self, what: str, proc=None) -> str:
        out = f"\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-6000:]}" if proc else ""
        return (f"{what}{out}\njob output:\n{slurm_fixture.job_output(self.dir)}\n"
                f"rank records: {slurm_fixture.rank_records(self.probe_dir)}")

    def check(self, launcher: str, positions, nodes=None):
        """positions[r] = (local rank, local size) of rank r; nodes[r] its Slurm node."""
        size = len(positions)
        summary_path = self.run_dir / "summary.json"
        assert summary_path.exists(), self.explain("no summary.json")
        summary = json.loads(summary_path.read_text())
        assert summary["world_size"] == size and summary["steps"] == STEPS, summary
        assert_ranks_identical(summary, self.run_dir, size)
        assert summary["test_accuracy"] > MIN_ACCURACY, summary["test_accuracy"]
        records = slurm_fixture.rank_records(self.probe_dir)
        assert len(records) == size, self.explain(f"{len(records)} rank records, expected {size}")
        problems = []
        for rank, (record, (local_rank, local_size)) in enumerate(zip(records, positions)):
            want = {"rank": rank, "size": size, "local_rank": local_rank,
                    "local_size": local_size}
            detected = record.get("detected") or {"error": record.get("detected_error")}
            if detected != dict(want, launcher=launcher):
                problems.append(f"rank {rank}: horovod_train.env detected {detected}; expected "
                                f"{dict(want, launcher=launcher)} (Slurm env: {record['env']})")
            backend = {k: v for k, v in (record.get("backend") or {}).items() if k != "name"}
            if backend != want:
                problems.append(f"rank {rank}: the backend joined as {backend}; expected {want}")
            if nodes and record["env"].get("SLURMD_NODENAME") != nodes[rank]:
                problems.append(f"rank {rank} ran on {record['env'].get('SLURMD_NODENAME')}; "
                                f"expected {nodes[rank]}")
        assert not problems, "\n".join(problems)


def _render(job, backend: str, nodes: int, tasks_per_node: int, port_base=None,
            train_argv=None) -> str:
    """The sbatch script `python -m launch slurm` writes for this job (of the probe, unless
    `train_argv` says which training command)."""
    script = job.dir / f"{backend}.sbatch.sh"
    argv = [sys.executable, "-m", "launch", "slurm", "--backend", backend, "--nodes", str(nodes),
            "--tasks_per_node", str(tasks_per_node), "--time", "00:10:00", "-o", str(script)]
    if port_base is not None:
        argv += ["--mwms_port_base", str(port_base)]
    proc = run_cli(argv + ["--", *(train_argv or job.train_argv())])
    assert proc.returncode == 0, proc.stderr
    return str(script)


# ------------------------------------------------------------------------------ one node

@pytest.mark.parametrize("backend", ["horovod", "mwms"])
def test_sbatch_rendered_script_one_node_two_tasks(one_node, tmp_path, backend):
    """`python -m launch slurm --nodes 1 --tasks_per_node 2`, submitted with sbatch --wait:
    horovod under srun --mpi=pmix, mwms with TF_CONFIG built by the script."""
    job = Job(tmp_path)
    # MWMS workers listen on this machine's ports: free ones below the ephemeral range, so
    # no other test running here can hold them.
    port_base = free_port_base(2) if backend == "mwms" else None
    job.run(one_node, ["sbatch", "--wait", _render(job, backend, 1, 2, port_base)])
    job.check("srun", [(0, 2), (1, 2)], nodes=one_node.node_names * 2)
    _console_is_ours(slurm_fixture.job_output(job.dir))


def test_srun_two_mwms_tasks_without_tasks_per_node(one_node, tmp_path):
    """`srun -n 2 python -m horovod_train --backend=mwms`: no --ntasks-per-node, so srun
    sets no SLURM_NTASKS_PER_NODE (only SLURM_STEP_TASKS_PER_NODE and
    SLURM_TASKS_PER_NODE): local size must still come out 2, and mwms must derive both
    workers from the Slurm variables (no TF_CONFIG is given). Horovod's ranks under srun
    --mpi=pmix are the rendered sbatch script's (--ntasks-per-node in its #SBATCH lines) and
    test_salloc_launch_run_srun's (without)."""
    job = Job(tmp_path)
    proc = job.run(one_node, ["srun", "--mpi=none", "-n", "2", "--kill-on-bad-exit=1",
                              "--time=10", *job.train_argv(), "--backend=mwms"])
    job.check("srun", [(0, 2), (1, 2)], nodes=one_node.node_names * 2)
    _console_is_ours(proc.stdout + proc.stderr)


def _console_is_ours(text: str):
    """Under srun too: no TensorFlow C++ start-up line, no absl prefix on our lines."""
    from horovod_train import console
    noise = console.noise_patterns(driver_loaded=False)
    lines = text.splitlines()
    assert not [line for line in lines if noise.fullmatch(line)], text[-3000:]
    assert not [line for line in lines if ABSL_PREFIX.match(line)], text[-3000:]
    assert any(line.startswith("done  | steps") for line in lines), text[-3000:]


def test_salloc_launch_run_srun(one_node, tmp_path):
    """Inside `salloc -n 2`: `python -m launch run --launcher srun -np 2 -- ...`
    (docs/launch.md), which runs srun --mpi=pmix --ntasks=2 (no --ntasks-per-node)."""
    job = Job(tmp_path)
    proc = job.run(one_node, ["salloc", "-n", "2", "--time=10", sys.executable, "-m", "launch",
                              "run", "--launcher", "srun", "-np", "2", "--", *job.train_argv()])
    job.check("srun", [(0, 2), (1, 2)], nodes=one_node.node_names * 2)
    _console_is_ours(proc.stdout + proc.stderr)


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_salloc_hosts_from_slurm_env(one_node, tmp_path, launcher):
    """Inside `salloc -n 2`: `python -m launch hosts --slurm_env > hosts`, then
    `python -m launch run --hostfile hosts [--launcher mpirun]`: horovodrun --gloo or
    mpirun (which starts its daemon with srun, as Open MPI does in an allocation)."""
    job = Job(tmp_path)
    hosts = tmp_path / "hosts"
    launcher_flags = "--launcher mpirun" if launcher == "mpirun" else ""
    shell = (f'set -e; "$0" -m launch hosts --slurm_env > {hosts}; '
             f'exec "$0" -m launch run {launcher_flags} --hostfile {hosts} -- "$@"')
    # A fresh HOME: horovodrun caches its ssh and NIC checks in ~/.horovod for an hour.
    proc = one_node.run(["salloc", "-n", "2", "--time=10", "bash", "-c", shell, sys.executable,
                         *job.train_argv()], cwd=tmp_path, timeout=JOB_TIMEOUT_S,
                        HT_PROBE_DIR=job.probe_dir, HOME=tmp_path)
    assert proc.returncode == 0, job.explain(f"salloc exited {proc.returncode}", proc)
    listed = [line for line in hosts.read_text().splitlines() if not line.startswith("#")]
    assert listed == [f"{one_node.node_names[0]} slots=2"], hosts.read_text()
    job.check(launcher, [(0, 2), (1, 2)])


def test_sbatch_wrap_without_srun_is_refused(one_node, tmp_path):
    """`sbatch -n 2 --wrap "python -m horovod_train ..."`: the batch script is one process,
    yet it sees SLURM_NTASKS=2 and SLURM_PROCID=0. Training there alone, or waiting for a
    peer that never comes, is wrong: the program must refuse, exit 2, naming srun."""
    job = Job(tmp_path)
    command = " ".join([*TRAIN, *FLAGS, f"--summary_json={job.run_dir}/summary.json"])
    proc = one_node.run(["sbatch", "-n", "2", "--time=5", "--wait", "-o", "wrap-%j.out",
                         "--wrap", command], cwd=tmp_path, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 2, job.explain(
        f"sbatch --wait exited {proc.returncode}; expected 2 (the program's refusal)", proc)
    output = slurm_fixture.job_output(tmp_path)
    assert "srun" in output and "Traceback" not in output, output
    assert not (job.run_dir / "summary.json").exists()


def test_srun_horovod_without_an_mpi_plugin_is_refused(one_node, tmp_path):
    """`srun -n 2 python -m horovod_train` on a cluster whose MpiDefault is none: srun wires
    no MPI, and Open MPI would abort each rank in MPI_Init with a page of text. Every
    rank exits 2 instead, with one line naming srun --mpi=pmix."""
    job = Job(tmp_path)
    proc = one_node.run(["srun", "-n", "2", "--time=5", *TRAIN, *FLAGS, "--backend=horovod",
                         f"--summary_json={job.run_dir}/summary.json"],
                        cwd=tmp_path, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 2, job.explain(f"srun exited {proc.returncode}; expected 2", proc)
    assert proc.stderr.count("srun --mpi=pmix") >= 2 and "MPI_Init" not in proc.stderr, \
        proc.stderr[-3000:]


# ----------------------------------------------------------------------------- two nodes

@pytest.mark.parametrize("backend", ["horovod", "mwms"])
def test_sbatch_rendered_script_two_nodes(two_nodes, tmp_path, backend):
    """`python -m launch slurm --nodes 2 --tasks_per_node 1`: one rank on n1, one on n2, each
    node a network namespace of its own; sbatch runs from the login namespace. mwms uses the
    port base the script derives from the job id (the nodes' ports are their own)."""
    job = Job(tmp_path)
    before = slurm_fixture.link_bytes(two_nodes)
    job.run(two_nodes, ["sbatch", "--wait", _render(job, backend, 2, 1)])
    job.check("srun", [(0, 1), (0, 1)], nodes=["n1", "n2"])
    # Every step allreduces all gradients between the two nodes: each must have sent and
    # received at least half of them per step over its veth link.
    floor = STEPS * sum(w.nbytes for w in load_weights(job.run_dir)) // 2
    for node, (rx0, tx0), (rx1, tx1) in zip(("n1", "n2"), before,
                                            slurm_fixture.link_bytes(two_nodes)):
        assert rx1 - rx0 >= floor and tx1 - tx0 >= floor, \
            f"{node}: rx {rx1 - rx0} / tx {tx1 - tx0} bytes crossed its link; expected >= {floor}"


def test_two_node_cluster_has_separate_tmpfs(two_nodes, tmp_path):
    """Each node's TmpFS path is its own directory: a file one node's job writes there is
    not seen by the other's (cheap: no training)."""
    tmpfs = os.path.join(two_nodes.state_dir, "tmpfs")
    proc = two_nodes.run(["srun", "-N", "2", "-n", "2", "--time=2", "bash", "-c",
                          f'touch {tmpfs}/from-$SLURMD_NODENAME; ls {tmpfs} | paste -sd,'],
                         cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["from-n1", "from-n2"], proc.stdout
    for node in ("n1", "n2"):
        assert os.listdir(os.path.join(two_nodes.state_dir, "tmp", node)) == [f"from-{node}"]


# ------------------------------------------------------------- a live job's stacks, on 2 nodes

# Rank 1 (on n2) sleeps 1 s before each step's collectives, so nearly always it is in that
# sleep while rank 0 (on n1) waits in the step's allreduce. The test asks once the first
# train record (step 2) is written, so 10 such steps (10 s) are left: more than a request
# takes (about 1 s; 5 s if it is asked 3 times).
LIVE_STEPS = 12
LIVE_FLAGS = [f"--max_steps={LIVE_STEPS}", "--log_every=2", "--eval_every_epochs=0",
              "--intra_op_threads=1", "--inject_delay=step:1@1"]
LIVE_WAITING = re.compile(r"^rank 0: in the step's gradient allreduce \(step (\d+)[^)]*\) "
                          r"for \d+ s, at (\S+):\d+ in \S+$", re.M)  # <listcomp> too
LIVE_SLEEPING = re.compile(r"^rank 1: not in a collective, at trainer\.py:\d+ in _one_step$",
                           re.M)


def _trains(run_dir) -> bool:
    """Whether metrics.jsonl holds a train record (it opens with the config, at start)."""
    path = run_dir / "metrics.jsonl"
    return path.exists() and '"kind": "train"' in path.read_text()


def _ask_live_stacks(cluster, run_dir, cwd) -> str:
    """`python -m launch stacks` from the login node (it shares the run dir with n1 and n2),
    asked again (3 times at most) until a dump catches rank 0 waiting for rank 1."""
    for _ in range(3):
        shown = cluster.run([sys.executable, "-m", "launch", "stacks", f"--run_dir={run_dir}"],
                            cwd=cwd, timeout=120)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        if "rank 0 waits for rank 1" in shown.stdout:
            break
        time.sleep(1)
    return shown.stdout


def test_live_job_stacks_on_request_from_both_nodes(two_nodes, tmp_path):
    """Issue 43 item 2 through a launcher's hosts: a 2-node job (rank 0 on n1, rank 1 on
    n2, each node its own network namespace) started with --run_dir on the file system
    both nodes share. `python -m launch stacks --run_dir D` run on the login node reaches
    both ranks through D/stacks/REQUEST: each writes its stacks there, and the summary
    names each rank's innermost frame of ours and the collective rank 0 waits in. The
    job is still running after the request, then ends well."""
    job, live = Job(tmp_path), tmp_path / "live"
    script = _render(job, "horovod", 2, 1, train_argv=[
        *TRAIN, *LIVE_FLAGS, f"--run_dir={live}", f"--summary_json={job.run_dir}/summary.json"])
    waiter = two_nodes.popen(["sbatch", "--wait", script], cwd=tmp_path)
    try:
        for what, ready in (("rank 0's record", (live / "stacks" / "rank0.json").exists),
                            ("rank 1's record", (live / "stacks" / "rank1.json").exists),
                            ("first train record", lambda: _trains(live))):
            _wait(job, what, ready, lambda: waiter.poll() is None)
        shown = _ask_live_stacks(two_nodes, live, tmp_path)
        # The job's id: its output file (%x-%j.out) is there since it started.
        job_id = re.search(r"-(\d+)\.out$", glob.glob(str(tmp_path / "*.out"))[0]).group(1)
        state = _state(two_nodes, job_id, tmp_path)
        out, err = waiter.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if waiter.poll() is None:
            two_nodes.cancel_all()
            waiter.kill()
            waiter.wait()
    assert state == "RUNNING", f"after the request, job {job_id}: {state!r}\n{shown}"
    assert waiter.returncode == 0, job.explain(f"sbatch --wait exited {waiter.returncode}: "
                                               f"{out}{err}")

    assert shown.startswith(f"stacks of the job in {live}, on request"), shown
    waiting = LIVE_WAITING.search(shown)
    assert waiting and LIVE_SLEEPING.search(shown), shown
    assert "rank 0 waits for rank 1" in shown, shown
    # Rank 0's frame is a file of this package, as rank 1's is (trainer.py).
    assert glob.glob(os.path.join(ROOT, "horovod_train", "**", waiting.group(2)),
                     recursive=True), shown
    stacks = live / "stacks"
    for rank, node in enumerate(("n1", "n2")):
        record = json.loads((stacks / f"rank{rank}.json").read_text())
        assert record["slurm_node"] == node, record
        text = (stacks / f"rank{rank}.txt").read_text()
        assert "on request" in text and text.count("most recent call first") >= 2, text[-3000:]
        assert f'File "{ROOT}/horovod_train/' in text, text[-3000:]
    # The job ran on past the step rank 0 was caught in, to its last step.
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == LIVE_STEPS, summary
    assert int(waiting.group(1)) < LIVE_STEPS, shown
    assert f"done  | steps {LIVE_STEPS} " in slurm_fixture.job_output(tmp_path)


# ------------------------------------------------------------------- after a preemption

# digits at global batch 64 (2 ranks x 32), 2 ranks at most ~150 steps/s here: each stop
# below comes within a second of a checkpoint every 50 steps, far before step 1000, and
# one rank trains the rest in 10-20 s.
RELAUNCH_STEPS = 1000
RELAUNCH_FLAGS = [flag for flag in FLAGS if not flag.startswith("--max_steps=")] + [
    f"--max_steps={RELAUNCH_STEPS}", "--epochs=100", "--checkpoint_every=50", "--batch_size=32"]
STOPPED = re.compile(r"stopped on SIGTERM at step (\d+), after writing a checkpoint there")
# SIGNALING: squeue's state while slurmctld delivers a signal (scancel -s, the early
# time-limit signal): the job is still running.
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SIGNALING")


def _steps(ckpt) -> list[int]:
    return sorted(int(path.name[len("ckpt-"):]) for path in ckpt.glob("ckpt-*"))


def _state(cluster, job_id: str, cwd) -> str:
    """The job's state; '' once it has left the queue."""
    proc = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"], cwd=cwd, timeout=60)
    return proc.stdout.strip()


def _wait(job, what: str, condition, running=None, timeout=JOB_TIMEOUT_S):
    """Polls `condition` until it holds; fails at the timeout, or at once when `running`
    (checked every 2 s) says the job it waits on is over."""
    deadline, polls = time.monotonic() + timeout, 0
    while not condition():
        assert time.monotonic() < deadline, job.explain(f"no {what} within {timeout} s")
        polls += 1
        if running is not None and polls % 10 == 0 and not running() and not condition():
            pytest.fail(job.explain(f"the job ended before its {what}"))
        time.sleep(0.2)


def _release_requeue_hold(job, cluster, job_id: str, requeued_at: float):
    """Lets a requeued job start now instead of in about two minutes. Slurm holds it so
    that its new launch credential is newer than the revocation the requeue sent to the
    nodes. Both are stamped in whole seconds, and a relaunch within the requeue's own
    second is refused (slurmd: "Job 1 already killed, do not launch batch job"; slurmctld:
    "Killing non-startable batch JobId=1: Job credential revoked"): the job fails with exit
    code 1 and never runs again. Ranks stop within a second of the requeue, and released at
    once the job was refused so in 1 of 5 runs here. So the hold ends at the next second
    after the requeue, not before."""
    time.sleep(max(0.0, math.floor(requeued_at) + 1.05 - time.time()))
    job.run(cluster, ["scontrol", "update", f"jobid={job_id}", "StartTime=now"])


def _meta(ckpt, step: int) -> dict:
    return json.loads((ckpt / f"ckpt-{step:09d}" / "meta.json").read_text())


def test_sbatch_job_requeued_cancelled_and_resubmitted_on_one_node(two_nodes, tmp_path):
    """Issue 42 item 3, the rendered script's relaunch story (launch/sbatch.py, RELAUNCH):
    a 2-node job is requeued after its first checkpoint (scontrol requeue: SIGTERM, then
    the same job again, as Slurm does to a job it preempts in REQUEUE mode); its ranks
    stop with 143 after a checkpoint, and the requeued run resumes there on 2 ranks,
    appending to the same output file. Cancelled after a checkpoint of its own, it stops
    the same way; the same file submitted with `sbatch --nodes=1` resumes on 1 rank with
    the global batch kept (accumulation 1 -> 2) and finishes. Launches of its own: it
    signals the job's ranks (requeue, scancel) and needs the jobs in this order."""
    job, ckpt = Job(tmp_path), tmp_path / "ckpt"
    script = _render(job, "horovod", 2, 1, train_argv=[
        *TRAIN, *RELAUNCH_FLAGS, f"--checkpoint_dir={ckpt}",
        f"--summary_json={job.run_dir}/summary.json"])
    first = job.run(two_nodes, ["sbatch", "--parsable", script]).stdout.strip().split(";")[0]
    try:
        def running():
            return _state(two_nodes, first, tmp_path) in ACTIVE

        _wait(job, "first checkpoint", lambda: _steps(ckpt), running)
        job.run(two_nodes, ["scontrol", "requeue", first])
        requeued_at = time.time()
        _wait(job, "requeued job", lambda: _state(two_nodes, first, tmp_path) == "PENDING")
        stopped = _steps(ckpt)[-1]
        assert _meta(ckpt, stopped)["fingerprint"]["world_size"] == 2
        _release_requeue_hold(job, two_nodes, first, requeued_at)
        _wait(job, "checkpoint of the requeued run", lambda: _steps(ckpt)[-1] > stopped, running)
        job.run(two_nodes, ["scancel", first])
        _wait(job, "end of the cancelled job", lambda: not running())
    finally:
        two_nodes.run(["scancel", first], cwd=tmp_path, timeout=60)
    cancelled = _steps(ckpt)[-1]
    assert _meta(ckpt, cancelled)["fingerprint"]["world_size"] == 2

    text = (tmp_path / f"horovod_train-{first}.out").read_text()
    lines = text.splitlines()
    assert "DUE TO JOB REQUEUE" in text, text[-4000:]
    assert STOPPED.findall(text) == [str(stopped)] * 2 + [str(cancelled)] * 2, text[-4000:]
    assert text.count("Exited with exit code 143") == 4, text[-4000:]
    # Both runs' lines, in one file (--open-mode=append); the second resumed on 2 ranks as
    # it was, so nothing changed.
    assert sum(line.startswith("config | backend horovod") for line in lines) == 2, text
    assert f"checkpoint | resumed from step {stopped}" in lines, text[-4000:]

    proc = job.run(two_nodes, ["sbatch", "--nodes=1", "--wait", script])
    second = proc.stdout.split()[-1]
    change = "written by 2 ranks on 1 rank: accumulation 1 -> 2, global batch 64 kept"
    lines = (tmp_path / f"horovod_train-{second}.out").read_text().splitlines()
    assert f"checkpoint | resumed from step {cancelled} {change}" in lines, lines
    assert any(line.startswith(f"done  | steps {RELAUNCH_STEPS} ") for line in lines), lines
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["steps"] == RELAUNCH_STEPS, summary
    assert summary["resumed"]["step"] == cancelled and summary["resumed"]["change"] == change
    assert summary["grad_accum_steps"] == 2 and summary["global_batch"] == 64
    assert summary["test_accuracy"] > MIN_ACCURACY, summary["test_accuracy"]
    final = _meta(ckpt, RELAUNCH_STEPS)
    assert final["fingerprint"]["world_size"] == 1, final
    assert final["fingerprint"]["speed.grad_accum_steps"] == 2, final
    assert final["lr_schedule"]["scale"] == 2.0, final  # the 2-rank run's learning rate
