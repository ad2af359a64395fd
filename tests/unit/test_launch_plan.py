"""Pure argv builders and env helpers (launch/plan.py, launch/envvars.py)."""
import pytest

from launch.envvars import (cpu_sharing_env, forwarded_names, parse_env_assignments,
                            unset_only)
from launch.errors import LaunchError
from launch.hostfile import Host
from launch.plan import horovodrun_argv, mpich_argv, mpirun_argv, srun_argv

CMD = ["python", "-m", "horovod_train", "--max_steps=10"]
HOSTS = [Host("h1", 2), Host("h2", 2)]


def test_horovodrun_gloo_with_host_list():
    assert horovodrun_argv(CMD, np=4, hosts=HOSTS) == [
        "horovodrun", "-np", "4", "-H", "h1:2,h2:2", "--gloo"] + CMD


def test_horovodrun_mpi_with_hostfile_and_every_knob():
    argv = horovodrun_argv(CMD, np=2, hostfile="hostfiles/localhost", controller="mpi",
                           network_interfaces=["eth0", "ib0"], fusion_threshold_mb=64,
                           cycle_time_ms=2.5, timeline_filename="runs/tl.json",
                           timeline_mark_cycles=True, start_timeout_s=60, ssh_port=2222,
                           ssh_identity_file="/keys/id", output_filename="runs/logs",
                           verbose=True)
    assert argv == ["horovodrun", "-np", "2", "--hostfile", "hostfiles/localhost", "--mpi",
                    "--network-interfaces", "eth0,ib0", "--fusion-threshold-mb", "64",
                    "--cycle-time-ms", "2.5", "--timeline-filename", "runs/tl.json",
                    "--timeline-mark-cycles", "--start-timeout", "60", "-p", "2222",
                    "-i", "/keys/id", "--output-filename", "runs/logs", "--verbose"] + CMD


def test_horovodrun_defaults_to_localhost_np():
    assert horovodrun_argv(["python", "t.py"], np=3)[3:5] == ["-H", "localhost:3"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"np": 5, "hosts": HOSTS}, "at most 4 (the total slots"),
    ({"np": 0}, "from 1 to"),
    ({"np": 2, "controller": "tcp"}, "one of gloo, mpi"),
    ({"np": 2, "network_interfaces": ["eth0;x"]}, "network interface name"),
    ({"np": 2, "hostfile": "--evil"}, "does not start with '-'"),
    ({"np": 2, "timeline_filename": "a\nb"}, "control characters"),
    ({"np": 2, "fusion_threshold_mb": 1.5}, "whole number"),
    ({"np": 2, "hosts": [Host("fe80::1", 2)]}, "IPv6"),
])
def test_horovodrun_rejections(kwargs, fragment):
    with pytest.raises(LaunchError) as err:
        horovodrun_argv(CMD, **kwargs)
    assert fragment in str(err.value)


@pytest.mark.parametrize("command", [[], "python train.py", ["-np", "x"], ["python", "a\x00"]])
def test_bad_commands_rejected(command):
    with pytest.raises(LaunchError, match="command"):
        horovodrun_argv(command, np=1)


def test_mpirun_openmpi_full():
    argv = mpirun_argv(CMD, np=4, hosts=HOSTS, forward_env=["HOROVOD_X", "PATH"],
                       bind_to="core", map_by="ppr:2:node", as_root=True, oversubscribe=True,
                       mca={"btl": "^openib", "plm_rsh_agent": "/opt/agent --netns"},
                       tag_output=True)
    assert argv == ["mpirun", "-np", "4", "--allow-run-as-root", "--oversubscribe",
                    "-H", "h1:2,h2:2", "--bind-to", "core", "--map-by", "ppr:2:node",
                    "-mca", "btl", "^openib", "-mca", "plm_rsh_agent", "/opt/agent --netns",
                    "--tag-output", "-x", "HOROVOD_X", "-x", "PATH"] + CMD


def test_mpirun_hostfile_and_oversubscribe_allows_more_ranks():
    argv = mpirun_argv(CMD, np=8, hosts=HOSTS, hostfile="hosts.txt", oversubscribe=True)
    assert argv[:9] == ["mpirun", "-np", "8", "--oversubscribe", "--hostfile", "hosts.txt",
                        "--bind-to", "none", "--map-by"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"forward_env": ["A=B"]}, "environment variable name"),
    ({"forward_env": ["$(x)"]}, "environment variable name"),
    ({"mca": {"btl": "tcp;reboot"}}, "a value of letters"),
    ({"mca": {"btl": "$(reboot)"}}, "a value of letters"),
    ({"mca": {"Bad-Name": "1"}}, "MCA parameter name"),
    ({"map_by": "slot;x"}, "OpenMPI mapping"),
    ({"bind_to": "everything"}, "one of none"),
])
def test_mpirun_rejections(kwargs, fragment):
    with pytest.raises(LaunchError) as err:
        mpirun_argv(CMD, np=2, **kwargs)
    assert fragment in str(err.value)


def test_mpich_hydra():
    argv = mpich_argv(CMD, np=4, hosts=HOSTS, ppn=2, forward_env=["NCCL_DEBUG", "TF_X"],
                      bind_to="core", launcher="ssh", launcher_exec="/usr/bin/ssh")
    assert argv == ["mpiexec", "-n", "4", "-hosts", "h1:2,h2:2", "-ppn", "2",
                    "-genvlist", "NCCL_DEBUG,TF_X", "-bind-to", "core", "-launcher", "ssh",
                    "-launcher-exec", "/usr/bin/ssh"] + CMD
    assert mpich_argv(CMD, np=2, hostfile="m.txt")[3:5] == ["-f", "m.txt"]


def test_srun():
    assert srun_argv(CMD, ntasks=16, nodes=2, ntasks_per_node=8, mpi="pmi2", gpus_per_task=1,
                     cpus_per_task=6, cpu_bind="cores") == [
        "srun", "--mpi=pmi2", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8",
        "--gpus-per-task=1", "--cpus-per-task=6", "--cpu-bind=cores",
        "--distribution=block", "--kill-on-bad-exit=1", "--export=ALL"] + CMD
    assert srun_argv(CMD) == ["srun", "--mpi=pmix", "--distribution=block",
                              "--kill-on-bad-exit=1", "--export=ALL"] + CMD
    with pytest.raises(LaunchError, match="one of pmix"):
        srun_argv(CMD, mpi="openmpi")


def test_forwarded_names_by_prefix_always_and_explicit():
    environ = {"HOROVOD_FUSION_THRESHOLD": "1", "NCCL_DEBUG": "INFO", "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": "/x", "OMP_NUM_THREADS": "4", "PATH": "/bin", "HOME": "/root",
               "BASH_FUNC_f%%": "() { :; }", "TF_bad-name": "1", "SECRET_TOKEN": "s"}
    names = forwarded_names(environ, extra_names=["MY_VAR"], additions={"ADDED": "1"})
    assert names == ["ADDED", "HOROVOD_FUSION_THRESHOLD", "MY_VAR", "NCCL_DEBUG",
                     "OMP_NUM_THREADS", "PATH", "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL"]
    with pytest.raises(LaunchError, match="environment variable name"):
        forwarded_names({}, extra_names=["BAD NAME"])


def test_shared_prefixes_forward_only_the_names_tensorflow_and_python_read():
    """TF_ is Terraform's too (issue 45): its settings, and other tools' PYTHON* names,
    stay on the launch host unless asked for with -x."""
    terraform = {"TF_CLI_CONFIG_FILE": "/home/u/.terraformrc", "TF_VAR_region": "eu",
                 "TF_LOG": "DEBUG", "TF_DATA_DIR": "/tmp/tf", "TF_CONFIG": "{}",
                 "PYTHONANYWHERE_TOKEN": "t", "PYTHON_KEYRING_BACKEND": "k"}
    read_by_tf = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
                  "TF_NUM_INTRAOP_THREADS": "4", "PYTHONHASHSEED": "0", "KERAS_BACKEND": "x"}
    names = forwarded_names({**terraform, **read_by_tf})
    assert names == sorted(read_by_tf)
    assert "TF_CLI_CONFIG_FILE" in forwarded_names(terraform, extra_names=["TF_CLI_CONFIG_FILE"])


def test_cpu_sharing_defaults_and_user_override():
    from launch.horovod_build import PATCHED
    env = cpu_sharing_env(cores=16, ranks_per_host=4, build=PATCHED)
    assert env == {"OMP_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4",
                   "HOROVOD_CYCLE_TIME": "5", "OMPI_MCA_mpi_yield_when_idle": "1"}
    assert cpu_sharing_env(2, 4)["OMP_NUM_THREADS"] == "1"  # never zero threads
    kept = unset_only(env, environ={"OMP_NUM_THREADS": "8"}, explicit={"HOROVOD_CYCLE_TIME": "1"})
    assert kept == {"TF_NUM_INTRAOP_THREADS": "4", "OMPI_MCA_mpi_yield_when_idle": "1"}
    with pytest.raises(LaunchError, match="positive whole number"):
        cpu_sharing_env(0, 2)


def test_env_assignments():
    assert parse_env_assignments(["A=1", "B=x y=z", "C="]) == {"A": "1", "B": "x y=z", "C": ""}
    for bad, fragment in (("A", "NAME=VALUE"), ("1A=2", "variable name"),
                          ("A=x\ny", "control characters")):
        with pytest.raises(LaunchError, match=fragment):
            parse_env_assignments([bad])
