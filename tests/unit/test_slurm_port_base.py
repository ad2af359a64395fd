"""mwms under Slurm: a port base per job, derived from SLURM_JOB_ID when none is given.

Every mwms job used port 12345 (+ local rank): two jobs sharing a node (two 1-GPU jobs
on an 8-GPU node) collided. The rule is written once (launch/contract.py) and used by
the worker (backends/tf_config.py) and, as bash arithmetic, by the sbatch script.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_envs import srun_task

from horovod_train.backends import tf_config as tfc
from launch import contract, ports
from launch.sbatch import SlurmJob, render_sbatch

REPO = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")


def ports_of(job_id: int, width: int) -> set[int]:
    base = contract.slurm_port_base(job_id, width)
    return set(range(base, base + width))


@pytest.mark.parametrize("width", [1, 2, 4, 8, 9, 64])
def test_bases_lie_below_the_ephemeral_range_and_above_the_lowest(width):
    for job_id in list(range(0, 5000, 7)) + [2**31 - 1, 67_108_863, 4_294_967_295]:
        base = contract.slurm_port_base(job_id, width)
        assert ports.LOWEST <= base and base + width - 1 < ports.DEFAULT_EPHEMERAL[0]


@pytest.mark.parametrize("width", [1, 2, 3, 8, 16])
def test_neighbouring_jobs_never_share_a_port(width):
    """Jobs submitted one after another (ids close together) get disjoint ports, also
    when their tasks per node differ."""
    for job_id in range(1000, 1400):
        for other in range(job_id + 1, job_id + 40):
            assert not ports_of(job_id, width) & ports_of(other, width)
            assert not ports_of(job_id, width) & ports_of(other, 1)


def test_the_formula_as_documented():
    # base = 15000 + (SLURM_JOB_ID mod slots) * stride, stride = 8 rounded up to cover
    # the tasks per node, slots = (32768 - 15000) // stride.
    assert contract.slurm_port_layout(2) == (15000, 8, 2221)
    assert contract.slurm_port_layout(9) == (15000, 16, 1110)
    assert contract.slurm_port_base(41, 2) == 15000 + 41 * 8
    assert contract.slurm_port_base(2221 + 5, 8) == 15000 + 5 * 8


# ---- the worker -------------------------------------------------------------------
def derived_workers(job, **extra):
    variables = srun_task(1, 0, 1, "2", "n1", job=job, **extra)
    return tfc.resolve_tf_config(variables, contract.DEFAULT_MWMS_PORT_BASE)["cluster"]["worker"]


def test_srun_workers_take_their_jobs_base():
    base = contract.slurm_port_base(41, 2)
    assert derived_workers("41") == [f"n1:{base}", f"n1:{base + 1}"]


def test_two_jobs_on_one_node_do_not_collide():
    """srun -n 2 --backend=mwms twice on one node: both took 12345 and 12346."""
    first, second = derived_workers("41"), derived_workers("42")
    assert not set(first) & set(second)


def test_a_given_base_wins():
    assert derived_workers("41", HOROVOD_TRAIN_MWMS_PORT_BASE="20000") == ["n1:20000",
                                                                            "n1:20001"]
    variables = srun_task(1, 0, 1, "2", "n1", job="41")
    config = tfc.resolve_tf_config(variables, 23456)  # --mwms_port_base=23456
    assert config["cluster"]["worker"] == ["n1:23456", "n1:23457"]


def test_outside_slurm_the_default_stays():
    config = tfc.resolve_tf_config({}, contract.DEFAULT_MWMS_PORT_BASE)
    assert config["cluster"]["worker"] == [f"localhost:{contract.DEFAULT_MWMS_PORT_BASE}"]


def test_a_malformed_job_id_is_named():
    from horovod_train.errors import UsageError
    with pytest.raises(UsageError, match="environment variable SLURM_JOB_ID: received '4x'"):
        derived_workers("4x")


def test_the_width_is_the_busiest_nodes_count_on_every_rank():
    """Uneven '3,2': a task on the 2-task node must pick the same base as one on the
    3-task node, or the workers would list different ports."""
    bases = set()
    for procid, nodeid, localid in ((0, 0, 0), (4, 1, 1)):
        variables = srun_task(procid, nodeid, localid, "3,2", "n[1-2]", job="77")
        workers = tfc.resolve_tf_config(variables, contract.DEFAULT_MWMS_PORT_BASE)
        bases.add(workers["cluster"]["worker"][0])
    assert bases == {f"n1:{contract.slurm_port_base(77, 3)}"}


# ---- the sbatch script ------------------------------------------------------------
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
for ((i = 0; i < FAKE_NTASKS; i++)); do SLURM_PROCID=$i "$@" || exit 1; done
"""
FAKE_SCONTROL = """#!/bin/bash
python3 -m launch nodelist "$3"
"""


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("job_id", ["1", "41", "2221", "2262", "987654321"])
def test_the_script_computes_the_same_base_as_the_worker(tmp_path, job_id):
    text = render_sbatch(SlurmJob(
        backend="mwms", nodes=2, tasks_per_node=2,
        command=("python3", "-c", "import os; print(os.environ['TF_CONFIG'])")))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    (bindir / "bash").symlink_to(BASH)
    (tmp_path / "job.sh").write_text(text)
    env = {"PATH": f"{bindir}:{Path(sys.executable).parent}", "PYTHONPATH": str(REPO),
           "SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": "n[1-2]", "FAKE_NTASKS": "4"}
    result = subprocess.run([BASH, str(tmp_path / "job.sh")], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    base = contract.slurm_port_base(int(job_id), 2)
    first = json.loads(result.stdout.splitlines()[0])
    assert first["cluster"]["worker"] == [f"n1:{base}", f"n1:{base + 1}", f"n2:{base}",
                                          f"n2:{base + 1}"]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_the_script_without_a_job_id_stops(tmp_path):
    text = render_sbatch(SlurmJob(backend="mwms", nodes=1, command=("true",)))
    (tmp_path / "job.sh").write_text(text)
    result = subprocess.run([BASH, str(tmp_path / "job.sh")], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert "SLURM_JOB_ID" in result.stderr and "sbatch" in result.stderr


def test_a_given_base_is_rendered_as_is():
    text = render_sbatch(SlurmJob(backend="mwms", nodes=1, command=("true",), port_base=20000))
    assert "PORT_BASE=20000\n" in text


def test_the_cli_leaves_the_base_to_the_job_unless_given():
    from launch import cli
    derived = cli.parse(["slurm", "--backend", "mwms", "--nodes", "1", "--", "true"], {})
    given = cli.parse(["slurm", "--backend", "mwms", "--nodes", "1", "--mwms_port_base", "12345",
                       "--", "true"], {})
    assert "SLURM_JOB_ID" in derived.text.split("PORT_BASE=", 1)[1].splitlines()[0]
    assert "PORT_BASE=12345\n" in given.text
