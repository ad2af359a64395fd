"""From a launch request to a plan (launch/spec.py): launcher choice, env, TF_CONFIG."""
import json

import pytest

from launch.errors import LaunchError
from launch.hostfile import Host
from launch.spec import HorovodKnobs, LaunchSpec, build_plan, first_ranks

CMD = ("python", "-m", "horovod_train")
LOCAL2 = (Host("localhost", 2),)
REMOTE = (Host("n1", 2), Host("n2", 2))


def plan_of(environ=None, **kwargs):
    kwargs.setdefault("backend", "horovod")
    kwargs.setdefault("command", CMD)
    return build_plan(LaunchSpec(**kwargs), environ or {})


def test_horovod_defaults_to_horovodrun_gloo_on_all_slots():
    plan = plan_of(hosts=REMOTE)
    assert plan.launcher == "horovodrun"
    assert [p.argv for p in plan.processes] == [
        ("horovodrun", "-np", "4", "-H", "n1:2,n2:2", "--gloo") + CMD]
    assert plan.processes[0].env == ()


def test_horovod_without_hosts_runs_on_localhost_np():
    plan = plan_of(np=2, controller="mpi")
    assert plan.processes[0].argv[:6] == ("horovodrun", "-np", "2", "-H", "localhost:2", "--mpi")


def test_horovod_mpirun_turns_knobs_into_forwarded_env():
    plan = plan_of({"NCCL_DEBUG": "INFO", "HOME": "/root"}, hosts=REMOTE, launcher="mpirun",
                   hostfile="hosts.txt", as_root=True,
                   horovod=HorovodKnobs(fusion_threshold_mb=64, cycle_time_ms=2,
                                        timeline_filename="t.json"))
    process = plan.processes[0]
    assert process.env_dict() == {"HOROVOD_FUSION_THRESHOLD": str(64 << 20),
                                  "HOROVOD_CYCLE_TIME": "2", "HOROVOD_TIMELINE": "t.json"}
    assert process.argv == (
        "mpirun", "-np", "4", "--allow-run-as-root", "-H", "n1:2,n2:2", "--bind-to",
        "none", "--map-by", "slot", "-mca", "rtc_hwloc_vmhole", "none",
        "-x", "HOROVOD_CYCLE_TIME", "-x", "HOROVOD_FUSION_THRESHOLD",
        "-x", "HOROVOD_TIMELINE", "-x", "NCCL_DEBUG") + CMD


def test_launchers_get_the_validated_list_not_the_file_except_ipv6_for_mpirun():
    # horovodrun's own hostfile reader breaks on comments and bare hosts.
    argv = plan_of(hosts=REMOTE, hostfile="hostfiles/commented").processes[0].argv
    assert argv[3:5] == ("-H", "n1:2,n2:2") and "--hostfile" not in argv
    v6 = (Host("fe80::1", 2),)
    argv = plan_of(hosts=v6, hostfile="v6hosts", launcher="mpirun").processes[0].argv
    assert argv[3:5] == ("--hostfile", "v6hosts")
    with pytest.raises(LaunchError, match="IPv6"):
        plan_of(hosts=v6, hostfile="v6hosts")  # horovodrun cannot address IPv6 hosts


def test_cpu_sharing_defaults_fill_only_unset_names_and_env_flag_wins():
    plan = plan_of({"OMP_NUM_THREADS": "3"}, hosts=(Host("localhost", 4),), cores_per_host=8,
                   env=(("HOROVOD_CYCLE_TIME", "1"),))
    assert plan.processes[0].env_dict() == {"TF_NUM_INTRAOP_THREADS": "2",
                                            "OMPI_MCA_mpi_yield_when_idle": "1",
                                            "HOROVOD_CYCLE_TIME": "1"}


def test_mwms_on_localhost_starts_one_process_per_worker_with_its_tf_config():
    plan = plan_of(backend="mwms", hosts=LOCAL2, port_base=23000)
    assert plan.launcher == "local"
    assert [p.argv for p in plan.processes] == [CMD, CMD]
    configs = [json.loads(p.env_dict()["TF_CONFIG"]) for p in plan.processes]
    assert [c["task"]["index"] for c in configs] == [0, 1]
    assert configs[0]["cluster"] == {"worker": ["localhost:23000", "localhost:23001"]}


def test_mwms_np_below_slots_lists_only_started_workers():
    plan = plan_of(backend="mwms", hosts=(Host("localhost", 4),), np=2)
    config = json.loads(plan.processes[1].env_dict()["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["localhost:12345", "localhost:12346"]
    assert first_ranks([Host("a", 2), Host("b", 2)], 3) == [Host("a", 2), Host("b", 1)]


def test_mwms_remote_hosts_go_through_mpirun_with_the_worker_contract():
    plan = plan_of({"PATH": "/bin"}, backend="mwms", hosts=REMOTE, np=3, port_base=30000)
    process = plan.processes[0]
    assert plan.launcher == "mpirun"
    assert process.env_dict() == {"HOROVOD_TRAIN_HOSTS": "n1:2,n2:1",
                                  "HOROVOD_TRAIN_MWMS_PORT_BASE": "30000"}
    assert "--map-by" in process.argv and process.argv[process.argv.index("--map-by") + 1] == "slot"
    assert {"HOROVOD_TRAIN_HOSTS", "HOROVOD_TRAIN_MWMS_PORT_BASE", "PATH"} <= {
        process.argv[i + 1] for i, a in enumerate(process.argv) if a == "-x"}
    assert any("derives TF_CONFIG" in note for note in plan.notes)


def test_horovodrun_mpi_as_root_allows_openmpi_root():
    env = plan_of(hosts=LOCAL2, controller="mpi", as_root=True).processes[0].env_dict()
    assert env == {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_rtc_hwloc_vmhole": "none"}


def _mca(argv) -> dict:
    return {argv[i + 1]: argv[i + 2] for i, word in enumerate(argv) if word == "-mca"}


def test_open_mpi_daemon_defaults_give_way_to_the_user():
    # mpirun: -mca on its line, unless --mca or the user's own OMPI_MCA_* says otherwise.
    argv = plan_of(hosts=REMOTE, launcher="mpirun").processes[0].argv
    assert _mca(argv) == {"rtc_hwloc_vmhole": "none"}
    argv = plan_of(hosts=REMOTE, launcher="mpirun",
                   mca=(("rtc_hwloc_vmhole", "biggest"),)).processes[0].argv
    assert _mca(argv) == {"rtc_hwloc_vmhole": "biggest"}
    user = {"OMPI_MCA_rtc_hwloc_vmhole": "heap"}
    assert _mca(plan_of(user, hosts=REMOTE, launcher="mpirun").processes[0].argv) == {}
    given = (("OMPI_MCA_rtc_hwloc_vmhole", "heap"),)
    assert _mca(plan_of(hosts=REMOTE, launcher="mpirun", env=given).processes[0].argv) == {}
    # horovodrun --mpi builds its own mpirun line: the default goes in its environment.
    env = plan_of(user, hosts=REMOTE, controller="mpi").processes[0].env_dict()
    assert "OMPI_MCA_rtc_hwloc_vmhole" not in env
    assert plan_of(hosts=REMOTE).processes[0].env == ()  # Gloo starts no Open MPI


def test_srun_uses_the_allocation():
    plan = plan_of(launcher="srun", np=16, srun_mpi="pmi2", backend="mwms")
    assert plan.processes[0].argv[:3] == ("srun", "--mpi=pmi2", "--ntasks=16")
    assert plan.processes[0].env_dict() == {"HOROVOD_TRAIN_MWMS_PORT_BASE": "12345"}


def test_srun_in_a_job_gives_mwms_the_jobs_own_port_base():
    """Inside an allocation, two jobs on one node must not share MWMS ports: the default
    base gives way to the job's (contract.slurm_port_base), as in the sbatch script."""
    from launch import contract
    env = {"SLURM_JOB_ID": "4242"}
    plans = [plan_of(env, launcher="srun", np=2, backend="mwms"),
             plan_of({"SLURM_JOB_ID": "4243"}, launcher="srun", np=2, backend="mwms")]
    bases = [int(p.processes[0].env_dict()["HOROVOD_TRAIN_MWMS_PORT_BASE"]) for p in plans]
    assert bases[0] == contract.slurm_port_base(4242, 2) and bases[0] != bases[1]
    given = plan_of(env, launcher="srun", np=2, backend="mwms", port_base=20000)
    assert given.processes[0].env_dict()["HOROVOD_TRAIN_MWMS_PORT_BASE"] == "20000"


@pytest.mark.parametrize("kwargs, fragment", [
    ({"backend": "tfdist"}, "one of horovod, mwms"),
    ({"launcher": "ssh", "hosts": LOCAL2}, "one of horovodrun"),
    ({}, "-np N, or hosts"),
    ({"hosts": REMOTE, "np": 5}, "at most 4"),
    ({"launcher": "mpirun", "controller": "gloo", "hosts": LOCAL2}, "Gloo"),
    ({"launcher": "local", "hosts": LOCAL2}, "more than one Horovod rank"),
    ({"launcher": "srun", "hosts": LOCAL2}, "no host list with --launcher srun"),
    ({"backend": "mwms", "launcher": "local", "hosts": REMOTE}, "localhost only"),
    ({"backend": "mwms", "launcher": "mpirun", "hosts": REMOTE, "map_by": "node"}, "slot for mwms"),
    ({"hosts": LOCAL2, "env": (("BAD-NAME", "1"),)}, "variable name"),
    ({"hosts": LOCAL2, "env": (("A", "x\ny"),)}, "control characters"),
    ({"backend": "mwms", "hosts": LOCAL2, "port_base": 80}, "from 1024"),
    ({"backend": "mwms", "launcher": "mpirun", "hosts": REMOTE, "np": 5, "oversubscribe": True},
     "one worker and one port per slot"),
    ({"hosts": LOCAL2, "command": ("-rf",)}, "not an option"),
])
def test_rejections_before_anything_is_planned(kwargs, fragment):
    with pytest.raises(LaunchError) as err:
        plan_of(**kwargs)
    assert fragment in str(err.value)
