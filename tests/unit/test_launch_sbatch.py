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
    assert "srun --mpi=pmix --ntasks-per-node=8 --cpus-per-task=6" in text
    assert "'$(touch PWNED); `reboot` '\"'\"'quoted'\"'\"' \"dq\" a;b'" in text


def test_cpu_job_has_no_gpu_lines_and_full_cpu_sharing_defaults():
    text = render("horovod", gpus_per_node=0, tasks_per_node=4, cpus_per_task=2)
    assert "--gpus-per-node" not in text
    assert "export NCCL_IB_HCA" not in text
    assert "export HOROVOD_CYCLE_TIME=5" in text
    assert "export OMPI_MCA_mpi_yield_when_idle=1" in text
    assert "#SBATCH --ntasks-per-node=4" in text


def test_nccl_settings_commented_unless_given():
    text = render("horovod", gpus_per_node=4)
    assert "# export NCCL_IB_HCA=mlx5_0,mlx5_1" in text
    assert "# export NCCL_SOCKET_IFNAME=ib0" in text


def run_script(tmp_path, text, ntasks, nodelist, with_scontrol):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    if with_scontrol:
        (bindir / "scontrol").write_text(FAKE_SCONTROL)
    for tool in bindir.iterdir():
        tool.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    python_dir = str(Path(sys.executable).parent)
    env = {"PATH": f"{bindir}:{python_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": nodelist,
           "FAKE_NTASKS": str(ntasks), "SRUN_ARGS": str(tmp_path / "srun_args"),
           "PYTHONPATH": str(REPO)}
    result = subprocess.run([BASH, str(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout, (tmp_path / "srun_args").read_text().splitlines()


def test_horovod_script_passes_the_command_verbatim_to_srun(tmp_path):
    command = ("python3", "-c", "import sys; print(sys.argv[1])", HOSTILE)
    stdout, srun_args = run_script(tmp_path, render("horovod", command=command, nodes=1,
                                                    tasks_per_node=1), 1, "n1", True)
    assert srun_args[:2] == ["--mpi=pmix", "--ntasks-per-node=1"]
    assert srun_args[-4:] == list(command)
    assert stdout == HOSTILE + "\n"
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("with_scontrol", [True, False])
def test_mwms_script_gives_each_task_the_tf_config_python_would(tmp_path, with_scontrol):
    command = ("python3", "-c", "import os; print(os.environ['TF_CONFIG'])")
    text = render("mwms", command=command, nodes=2, gpus_per_node=0, tasks_per_node=2,
                  port_base=20000)
    stdout, srun_args = run_script(tmp_path, text, 4, "n[07-08]", with_scontrol)
    configs = [json.loads(line) for line in stdout.splitlines()]
    assert configs == all_tf_configs(hosts_from_slurm("n[07-08]", "2(x2)"), 20000)
    assert configs[3]["cluster"]["worker"] == ["n07:20000", "n07:20001", "n08:20000",
                                               "n08:20001"]
    assert srun_args[0] == "--mpi=none"


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
    ({"backend": "mwms", "port_base": 65535, "tasks_per_node": 2}, "--port_base"),
])
def test_bad_slurm_inputs_rejected(kwargs, fragment):
    kwargs.setdefault("backend", "horovod")
    backend = kwargs.pop("backend")
    with pytest.raises(LaunchError) as err:
        render(backend, **kwargs)
    assert fragment in str(err.value)
