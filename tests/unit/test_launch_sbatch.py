"""sbatch rendering (launch/sbatch.py): syntax, quoting, and the per-task TF_CONFIG.

The rendered scripts are run for real under bash with stand-in `srun`/`scontrol`
programs, so the quoting and the bash TF_CONFIG builder are checked end to end.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launch.errors import LaunchError
from launch.sbatch import SlurmJob, render_sbatch
from launch.slurm_nodes import hosts_from_slurm
from launch.tfconfig import all_tf_configs

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "$(touch PWNED); `reboot` 'quoted' \"dq\" a;b"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

# Stand-in srun: drops its options, runs the command once per task like Slurm would,
# with SLURM_PROCID set (tasks numbered block-wise), and records its own argv.
FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$SRUN_ARGS"
while [[ "$1" == --* ]]; do shift; done
for ((i = 0; i < FAKE_NTASKS; i++)); do SLURM_PROCID=$i "$@" || exit 1; done
"""
FAKE_SCONTROL = """#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] || exit 9
python3 -m launch nodelist "$3"
"""
# scontrol that cannot reach its controller (no slurm.conf, no DNS SRV record): it
# prints nothing on stdout and exits 1, as Debian's does on a machine outside a cluster.
BROKEN_SCONTROL = """#!/bin/bash
echo "scontrol: fatal: Could not establish a configuration source" >&2
exit 1
"""
SCONTROLS = {"works": FAKE_SCONTROL, "fails": BROKEN_SCONTROL, "absent": None}


def render(backend="horovod", **kwargs):
    kwargs.setdefault("command", ("python", "-m", "horovod_train", "--note", HOSTILE))
    kwargs.setdefault("nodes", 2)
    return render_sbatch(SlurmJob(backend=backend, **kwargs))


@pytest.mark.parametrize("backend", ["horovod", "mwms"])
@pytest.mark.parametrize("gpus", [0, 8])
def test_rendered_script_is_valid_bash(tmp_path, backend, gpus):
    script = tmp_path / "job.sbatch"
    script.write_text(render(backend, gpus_per_node=gpus, cpus_per_task=4, partition="gpu",
                             time="1-02:00:00", env=(("MY_VAR", "a b $HOME"),)))
    result = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_horovod_script_lines():
    text = render("horovod", nodes=8, gpus_per_node=8, partition="gpu", time="04:00:00",
                  job_name="resnet", account="proj1", cpus_per_task=6, exclusive=True,
                  nccl_ib_hca="mlx5_0,mlx5_1", nccl_socket_ifname="ib0",
                  env=(("MY_VAR", "a b $HOME"),))
    for line in ("#SBATCH --job-name=resnet", "#SBATCH --nodes=8",
                 "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=6", "#SBATCH --time=04:00:00",
                 "#SBATCH --partition=gpu", "#SBATCH --account=proj1", "#SBATCH --exclusive",
                 "export NCCL_DEBUG=WARN", "export NCCL_IB_HCA=mlx5_0,mlx5_1",
                 "export NCCL_SOCKET_IFNAME=ib0", "export OMP_NUM_THREADS=6",
                 "export TF_NUM_INTRAOP_THREADS=6", "export MY_VAR='a b $HOME'"):
        # Exact line, or the line followed by its "  # why" comment.
        assert any(row.split("  #")[0] == line for row in text.splitlines()), line
    assert "srun --mpi=pmix --cpus-per-task=6" in text
    assert "'$(touch PWNED); `reboot` '\"'\"'quoted'\"'\"' \"dq\" a;b'" in text


@pytest.mark.parametrize("build, cycle", [("PATCHED", "5"), ("STOCK", "1")])
def test_cpu_job_has_no_gpu_lines_and_full_cpu_sharing_defaults(monkeypatch, build, cycle):
    """The cycle is the one the Horovod installed where the script is written suits
    (launch/horovod_build.py): a stock one keeps its 1 ms."""
    from launch import horovod_build
    monkeypatch.setattr(horovod_build, "detect", lambda: getattr(horovod_build, build))
    text = render("horovod", gpus_per_node=0, tasks_per_node=4, cpus_per_task=2)
    assert "--gpus-per-node" not in text
    assert "export NCCL_IB_HCA" not in text
    assert f"export HOROVOD_CYCLE_TIME={cycle}\n" in text
    assert "export OMPI_MCA_mpi_yield_when_idle=1" in text
    assert "#SBATCH --ntasks-per-node=4" in text


@pytest.mark.parametrize("backend", ["horovod", "mwms"])
def test_script_is_requeueable_and_srun_takes_the_allocations_counts(backend):
    """`sbatch --nodes=1 THIS_FILE` must run the same script on one node: sbatch reads
    #SBATCH lines only before the first command, and srun, given no count, takes the
    allocation's. A requeued run appends to the output file the first run wrote."""
    lines = render(backend, nodes=2, tasks_per_node=1).splitlines()
    first_command = next(i for i, line in enumerate(lines)
                         if line.strip() and not line.startswith("#"))
    directives = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert max(directives) < first_command
    assert {"#SBATCH --requeue", "#SBATCH --open-mode=append"} <= set(lines)
    assert "sbatch --nodes=1 THIS_FILE" in "\n".join(lines[:first_command])
    srun = next(line for line in lines if line.startswith("srun "))
    assert not any(flag in srun for flag in ("--nodes", "--ntasks", "-N ", "-n "))


def test_nccl_settings_commented_unless_given():
    text = render("horovod", gpus_per_node=4)
    assert "# export NCCL_IB_HCA=mlx5_0,mlx5_1" in text
    assert "# export NCCL_SOCKET_IFNAME=ib0" in text


def start_script(tmp_path, text, ntasks, nodelist, scontrol="works", **extra_env):
    """Runs the script under bash with stand-in srun/scontrol, and nothing else on PATH
    but the interpreter's directory (so the host's own scontrol never answers)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "srun").write_text(FAKE_SRUN)
    if SCONTROLS[scontrol] is not None:
        (bindir / "scontrol").write_text(SCONTROLS[scontrol])
    for tool in bindir.iterdir():
        tool.chmod(0o755)
    (bindir / "bash").symlink_to(BASH)  # the mwms task runs `bash -c`
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    python_dir = str(Path(sys.executable).parent)
    env = {"PATH": f"{bindir}:{python_dir}", "FAKE_NTASKS": str(ntasks), "SLURM_JOB_ID": "41",
           "SRUN_ARGS": str(tmp_path / "srun_args"), "PYTHONPATH": str(REPO), **extra_env}
    if nodelist is not None:
        env["SLURM_JOB_NODELIST"] = nodelist
    return subprocess.run([BASH, str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)


def run_script(tmp_path, text, ntasks, nodelist, scontrol="works", **extra_env):
    result = start_script(tmp_path, text, ntasks, nodelist, scontrol, **extra_env)
    assert result.returncode == 0, result.stderr
    return result.stdout, (tmp_path / "srun_args").read_text().splitlines()


def test_horovod_script_passes_the_command_verbatim_to_srun(tmp_path):
    command = ("python3", "-c", "import sys; print(sys.argv[1])", HOSTILE)
    stdout, srun_args = run_script(tmp_path, render("horovod", command=command, nodes=1,
                                                    tasks_per_node=1), 1, "n1")
    assert srun_args[:2] == ["--mpi=pmix", "--distribution=block"]
    assert srun_args[-4:] == list(command)
    assert stdout == HOSTILE + "\n"
    assert not (tmp_path / "PWNED").exists()


PRINT_TF_CONFIG = ("python3", "-c", "import os; print(os.environ['TF_CONFIG'])")


@pytest.mark.parametrize("scontrol", sorted(SCONTROLS))
def test_mwms_script_gives_each_task_the_tf_config_python_would(tmp_path, scontrol):
    """scontrol lists the nodes; where it is missing or fails, python -m launch does."""
    text = render("mwms", command=PRINT_TF_CONFIG, nodes=2, gpus_per_node=0,
                  tasks_per_node=2, port_base=20000)
    stdout, srun_args = run_script(tmp_path, text, 4, "n[07-08]", scontrol)
    configs = [json.loads(line) for line in stdout.splitlines()]
    assert configs == all_tf_configs(hosts_from_slurm("n[07-08]", "2(x2)"), 20000)
    assert configs[3]["cluster"]["worker"] == ["n07:20000", "n07:20001", "n08:20000",
                                               "n08:20001"]
    assert srun_args[0] == "--mpi=none"


@pytest.mark.parametrize("per_node, expected_exit", [("2", 0), ("3", 2)])
def test_mwms_script_stops_on_another_tasks_per_node(tmp_path, per_node, expected_exit):
    """The workers are laid out for the rendered tasks per node; sbatch --ntasks-per-node=3
    on a script rendered for 2 stops before srun, naming both and the fix."""
    text = render("mwms", command=PRINT_TF_CONFIG, nodes=2, tasks_per_node=2)
    result = start_script(tmp_path, text, 4, "n[07-08]", SLURM_NTASKS_PER_NODE=per_node)
    assert result.returncode == expected_exit, result.stdout + result.stderr
    if expected_exit:
        assert result.stderr.strip() == (
            "mwms job: received SLURM_NTASKS_PER_NODE=3 (sbatch --ntasks-per-node); expected "
            "2, the workers per node this script lists. Fix: submit it without "
            "--ntasks-per-node, or render it again with --tasks_per_node 3")
        assert not (tmp_path / "srun_args").exists()


NO_LAUNCH_PYTHON = """#!/bin/bash
echo "/usr/bin/python3: Error while finding module specification for 'launch'" >&2
exit 1
"""


@pytest.mark.parametrize("nodelist, python_without_launch", [
    ("n[07-08]", True),   # neither scontrol nor our package can expand it
    ("", False),          # nothing to expand
    (None, False),        # not run by sbatch at all
], ids=["no-expander", "empty", "unset"])
def test_mwms_script_stops_when_it_finds_no_nodes(tmp_path, nodelist, python_without_launch):
    """An empty node list used to give every task TF_CONFIG '{"cluster":{"worker":[]}}'
    silently; now the script stops before srun, naming the variable and the fix."""
    text = render("mwms", command=PRINT_TF_CONFIG, nodes=2, tasks_per_node=2)
    if python_without_launch:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "python3").write_text(NO_LAUNCH_PYTHON)
        (tmp_path / "bin" / "python3").chmod(0o755)
    result = start_script(tmp_path, text, 4, nodelist, "fails")
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mwms job: received SLURM_JOB_NODELIST=")
    assert "expected the job's node list" in last and "Fix: " in last
    assert not (tmp_path / "srun_args").exists()  # no task was started


@pytest.mark.parametrize("kwargs, fragment", [
    ({"partition": "gpu;reboot"}, "--partition"),
    ({"partition": "gpu debug"}, "no spaces"),
    ({"job_name": "$(x)"}, "--job_name"),
    ({"job_name": "-x"}, "--job_name"),
    ({"time": "4h"}, "HH:MM:SS"),
    ({"nodes": 0}, "--nodes"),
    ({"gpus_per_node": 65}, "--gpus_per_node"),
    ({"nccl_ib_hca": "mlx5 $(x)", "gpus_per_node": 8}, "--nccl_ib_hca"),
    ({"env": (("A-B", "1"),)}, "variable name"),
    ({"command": ()}, "command"),
    ({"backend": "tf"}, "one of horovod, mwms"),
    ({"backend": "mwms", "port_base": 65535, "tasks_per_node": 2}, "--mwms_port_base"),
])
def test_bad_slurm_inputs_rejected(kwargs, fragment):
    kwargs.setdefault("backend", "horovod")
    backend = kwargs.pop("backend")
    with pytest.raises(LaunchError) as err:
        render(backend, **kwargs)
    assert fragment in str(err.value)
