"""A real multi-host job on one machine: network namespaces are the hosts (issue 7, item 3).

tests/netns/topology.py builds a "login" namespace holding a bridge (10.77.0.1) and two
host namespaces (10.77.0.11, 10.77.0.12) on veth links to it. The launcher runs in the
login namespace; tests/netns/agent stands in for ssh and starts each remote command in
the namespace that owns the host's address. So every daemon and rank is on its own
"host", and all traffic between ranks crosses the veth links: the tests check the
links' byte counters, which path each remote command took, that every rank ends with
the same weights, and that those weights equal a localhost run with the same flags.
See docs/multihost_test.md.
"""
import importlib.util
import os
import secrets
import shutil
import sys

import numpy as np
import pytest

from helpers import OMPI_TMPDIR_VAR, ROOT, child_env, ompi_session_base, run_cli
from ranks import BIN, TRAIN, assert_ranks_identical, load_weights, run_ranks


NETNS_DIR = os.path.join(ROOT, "tests", "netns")
AGENT = os.path.join(NETNS_DIR, "agent")
LAUNCH = [sys.executable, "-m", "launch", "run"]
STEPS = 30
FLAGS = [f"--max_steps={STEPS}", "--deterministic", "--optimizer=sgd", "--learning_rate=0.05",
         "--intra_op_threads=1", "--eval_every_epochs=0", "--log_every=10"]
TIMEOUT_S = 300


def _load_topology():
    spec = importlib.util.spec_from_file_location("netns_topology",
                                                  os.path.join(NETNS_DIR, "topology.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


topology = _load_topology()


def _missing() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    for program in ("ip", "mpirun"):
        if shutil.which(program) is None:
            return f"`{program}` is not installed"
    if importlib.util.find_spec("horovod") is None:
        return "horovod is not importable"
    return None


@pytest.fixture(scope="module")
def cluster():
    """Two host namespaces plus a login namespace; always removed again, even on failure."""
    if _missing():
        pytest.skip(_missing())
    prefix = f"hvt{os.getpid()}-{secrets.token_hex(2)}"
    try:
        topo = topology.create(prefix, n_hosts=2)
    except topology.NetnsUnavailable as err:
        pytest.skip(f"the kernel refused network namespaces/veth/bridge (needs root or "
                    f"CAP_SYS_ADMIN + CAP_NET_ADMIN): {err}")
    try:
        yield topo
    finally:
        problems = topology.destroy(topo)
        assert not problems, problems


@pytest.fixture(scope="module")
def localhost_run(tmp_path_factory):
    """The same job, same flags, 2 ranks on localhost through the same launcher."""
    if _missing():
        pytest.skip(_missing())
    run_dir = tmp_path_factory.mktemp("localhost")
    argv = LAUNCH + ["--launcher", "mpirun", "-H", "localhost:2", "-np", "2", "--", *TRAIN,
                     *FLAGS]
    summary = run_ranks(argv, run_dir, timeout=TIMEOUT_S, PATH=_path())
    assert_ranks_identical(summary, run_dir, 2)
    return run_dir


def _path(*first: str) -> str:
    return os.pathsep.join([*first, BIN, os.environ.get("PATH", "/usr/bin:/bin")])


def _hostfile(topo, tmp_path) -> str:
    path = tmp_path / "hostfile"
    path.write_text("# one slot on each network namespace\n" + topo.hostfile_text(slots=1))
    return str(path)


def _link_bytes(topo) -> list[tuple[int, int]]:
    return [topology.link_bytes(ns) for ns in topo.host_namespaces]


def _agent_calls(log) -> list[tuple[str, str, str]]:
    """(host, namespace, command) per agent call."""
    with open(log, encoding="utf-8") as handle:
        return [tuple(line.rstrip("\n").split(" ", 2)) for line in handle if line.strip()]


def _run_across(topo, tmp_path, launcher_args, **env) -> dict:
    """Runs the job from the login namespace; returns the summary."""
    argv = (topo.exec_argv(topo.login) + LAUNCH + launcher_args
            + ["--hostfile", _hostfile(topo, tmp_path), "-np", "2", "--", *TRAIN, *FLAGS])
    env.setdefault("PATH", _path())
    return run_ranks(argv, tmp_path / "run", timeout=TIMEOUT_S,
                     HVT_NETNS_NAMESPACES=" ".join(topo.host_namespaces),
                     HVT_NETNS_AGENT_LOG=str(tmp_path / "agent.log"), **env)


def _check_result(summary, topo, tmp_path, localhost_run, before):
    run_dir = tmp_path / "run"
    assert summary["world_size"] == 2 and summary["steps"] == STEPS
    assert_ranks_identical(summary, run_dir, 2)
    ours, reference = load_weights(run_dir), load_weights(localhost_run)
    assert len(ours) == len(reference)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # Every step allreduces all gradients: each host must have sent and received at least
    # half of them per step over its veth (the bound holds for ring and MPI algorithms).
    floor = STEPS * sum(w.nbytes for w in reference) // 2
    for ns, (rx0, tx0), (rx1, tx1) in zip(topo.host_namespaces, before, _link_bytes(topo)):
        assert rx1 - rx0 >= floor and tx1 - tx0 >= floor, \
            f"{ns}: rx {rx1 - rx0} / tx {tx1 - tx0} bytes crossed the veth; expected >= {floor}"


def _check_placement(calls, topo, marker: str) -> None:
    """Each host's commands containing `marker` ran in that host's own namespace."""
    placed = {(host, ns) for host, ns, command in calls if marker in command}
    assert placed == set(zip(topo.hosts, topo.host_namespaces)), (marker, placed)


def test_mpirun_with_launch_agent_across_namespaces(cluster, localhost_run, tmp_path):
    """`python -m launch run --launcher mpirun --launch_agent AGENT`: orted reaches each
    host through the agent; OOB and the TCP BTL are limited to the test subnet."""
    before = _link_bytes(cluster)
    summary = _run_across(cluster, tmp_path, [
        "--launcher", "mpirun", "--launch_agent", AGENT, "--cores_per_host", "1",
        "--mca", "btl=self,tcp", "--mca", f"btl_tcp_if_include={topology.SUBNET}",
        "--mca", f"oob_tcp_if_include={topology.SUBNET}"])
    _check_result(summary, cluster, tmp_path, localhost_run, before)
    calls = _agent_calls(tmp_path / "agent.log")
    _check_placement(calls, cluster, "orted")
    # Each host's orted keeps its Open MPI session directory apart, as on a disk of its own
    # (the namespace hosts share /tmp and a host name: tests/netns/agent says why).
    base = os.environ[OMPI_TMPDIR_VAR]
    orteds = [(ns, command) for _, ns, command in calls if "orted" in command]
    assert orteds and all(f'orte_tmpdir_base "{os.path.join(base, ns)}"' in command
                          for ns, command in orteds), orteds


def test_mpirun_daemons_start_on_every_try(cluster, tmp_path):
    """Open MPI 4.1's orted, started on another host, crashed in about 1 launch in 7 here
    (SIGSEGV in hwloc_shmem_topology_write: the topology it shares with its ranks is
    mapped into the "biggest" hole of its address space, just below the stack). The
    launcher's Open MPI defaults must make every one of 25 launches start both daemons."""
    argv = (cluster.exec_argv(cluster.login) + LAUNCH
            + ["--launcher", "mpirun", "--launch_agent", AGENT,
               "--hostfile", _hostfile(cluster, tmp_path), "-np", "2", "--", "true"])
    failures = []
    for attempt in range(25):
        # Each launch its own Open MPI session directory: the namespace hosts share one /tmp,
        # and under load a launch's orted found `jf.<n>/0/<vpid>` left by an earlier launch
        # ("mkdir ... File exists"), which separate hosts' disks never show.
        session_dir = ompi_session_base()
        env = child_env(PATH=_path(), HVT_NETNS_NAMESPACES=" ".join(cluster.host_namespaces),
                        **{OMPI_TMPDIR_VAR: session_dir})
        try:
            proc = run_cli(argv, timeout=60, env=env)
        finally:
            shutil.rmtree(session_dir, ignore_errors=True)
        if proc.returncode != 0:
            failures.append((attempt, proc.returncode, proc.stderr[:400]))
    assert not failures, f"{len(failures)} of 25 launches failed; first: {failures[0]}"


def test_horovodrun_gloo_over_ssh_shim_across_namespaces(cluster, localhost_run, tmp_path):
    """`python -m launch run --launcher horovodrun` (Gloo): horovodrun runs `ssh` from PATH,
    which is the agent. Its own ssh check, NIC probe (task_fn) and rank start all go
    through it; Gloo uses the interface the probe found (hvt0)."""
    if not cluster.hosts_files:
        pytest.skip("/etc/netns is not writable: Horovod 0.28's Gloo process-set contexts "
                    "need each host's hostname to resolve to its own address")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "ssh").symlink_to(AGENT)
    before = _link_bytes(cluster)
    # A fresh HOME: horovodrun caches its ssh and NIC checks in ~/.horovod for an hour.
    summary = _run_across(cluster, tmp_path, [
        "--launcher", "horovodrun", "--controller", "gloo", "--cores_per_host", "1"],
        PATH=_path(str(shim)), HOME=str(tmp_path), HOROVOD_START_TIMEOUT="120")
    _check_result(summary, cluster, tmp_path, localhost_run, before)
    calls = _agent_calls(tmp_path / "agent.log")
    _check_placement(calls, cluster, "horovod.runner.task_fn")
    _check_placement(calls, cluster, "-m horovod_train")
    ranks = [command for _, _, command in calls if "-m horovod_train" in command]
    assert all("HOROVOD_GLOO_IFACE=hvt0" in command for command in ranks), ranks
