"""A real Slurm cluster on this machine for the Slurm tests: scripts/slurm_local.sh.

`start(nodes)` runs `slurm_local.sh up` with a state directory, ports and namespace names
of this test run's own (so it collides neither with a cluster someone started by hand nor
with the netns tests, which use other namespace names), and `stop()` runs `down`. Clients
(sbatch, srun, salloc) go through `Cluster.run`, which points them at that cluster
(SLURM_CONF) and, for the two-node cluster, runs them in its login namespace.

A machine that cannot host it (not root, Slurm not installed, namespaces refused: the
script's exit 4) skips with the script's reason; any other failure to start fails.
"""
import dataclasses
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from launch.ports import free_port_base

SCRIPT = os.path.join(ROOT, "scripts", "slurm_local.sh")
EXIT_UNAVAILABLE = 4  # slurm_local.sh: this machine cannot host the cluster
PROBE = os.path.join(ROOT, "tests", "multiprocess", "slurm_rank_probe.py")
TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "salloc", "scancel")


def why_unavailable() -> str | None:
    """Why no cluster can run here, before trying; None when it may."""
    if not sys.platform.startswith("linux"):
        return "Slurm runs on Linux only"
    if os.geteuid() != 0:
        return ("scripts/slurm_local.sh needs root (its daemons run as root, and two nodes "
                "need network namespaces); CI runs as root")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): `make setup` as root "
                f"installs slurm-wlm and munge, or apt-get install slurm-wlm munge")
    if importlib.util.find_spec("horovod") is None:
        return "horovod is not importable"
    return None


@dataclasses.dataclass
class Cluster:
    nodes: int
    state_dir: str
    port_base: int
    netns_prefix: str
    node_names: list[str]

    @property
    def conf(self) -> str:
        return os.path.join(self.state_dir, "slurm.conf")

    def client_argv(self, argv) -> list[str]:
        if self.nodes == 1:
            return list(argv)
        return ["ip", "netns", "exec", f"{self.netns_prefix}-login", *argv]

    def env(self, **extra) -> dict:
        return child_env(SLURM_CONF=self.conf, **extra)

    def run(self, argv, cwd, timeout=300, **env) -> subprocess.CompletedProcess:
        """A client command against this cluster. On a timeout every job of the cluster is
        cancelled, so one hung job does not hold the nodes for the tests after it."""
        try:
            return run_cli(self.client_argv(argv), timeout=timeout, env=self.env(**env),
                           cwd=str(cwd))
        except subprocess.TimeoutExpired:
            self.cancel_all()
            raise

    def popen(self, argv, cwd, **env) -> subprocess.Popen:
        """A client command left running (`sbatch --wait` while the test acts on its job);
        the caller waits for it, and on a failure calls cancel_all() before killing it."""
        return subprocess.Popen(self.client_argv(argv), env=self.env(**env), cwd=str(cwd),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def cancel_all(self) -> None:
        run_cli(self.client_argv(["scancel", "--full", "--user=root"]), timeout=60,
                env=self.env())

    def script(self, command: str, timeout=120) -> subprocess.CompletedProcess:
        return run_cli(["bash", SCRIPT, command], timeout=timeout, env=self.script_env())

    def script_env(self) -> dict:
        return child_env(HT_SLURM_DIR=self.state_dir, HT_SLURM_PORT_BASE=self.port_base,
                         HT_SLURM_NETNS=self.netns_prefix)


def start(nodes: int) -> Cluster:
    """`slurm_local.sh up --nodes N`; skips (with the reason) where it cannot run."""
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    tag = f"{os.getpid()}-{nodes}"
    # Short paths: munged's socket lives in the state dir (a unix socket path has 107 bytes).
    cluster = Cluster(nodes, f"/tmp/hts-{tag}", free_port_base(3), f"hts-t{tag}",
                      [os.uname().nodename.split(".")[0]] if nodes == 1 else ["n1", "n2"])
    proc = run_cli(["bash", SCRIPT, "up", "--nodes", str(nodes)], timeout=180,
                   env=cluster.script_env())
    if proc.returncode == EXIT_UNAVAILABLE:
        cluster.script("down")
        pytest.skip(f"slurm_local.sh up --nodes {nodes}: this machine cannot host the "
                    f"cluster: {proc.stderr.strip()}")
    if proc.returncode != 0:
        down = cluster.script("down")
        pytest.fail(f"slurm_local.sh up --nodes {nodes} failed ({proc.returncode}):\n"
                    f"{proc.stdout}{proc.stderr}\n(down: {down.stdout}{down.stderr})")
    return cluster


def stop(cluster: Cluster) -> None:
    proc = cluster.script("down")
    assert proc.returncode == 0, f"slurm_local.sh down failed:\n{proc.stdout}{proc.stderr}"
    assert not os.path.exists(cluster.state_dir), proc.stdout


def _topology():
    spec = importlib.util.spec_from_file_location(
        "netns_topology", os.path.join(ROOT, "tests", "netns", "topology.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def link_bytes(cluster: Cluster) -> list[tuple[int, int]]:
    """(rx, tx) bytes of each two-node host namespace's link to the bridge."""
    topology = _topology()
    return [topology.link_bytes(f"{cluster.netns_prefix}-h{i}") for i in range(cluster.nodes)]


def job_output(directory) -> str:
    """Every Slurm output file (%x-%j.out, -o files) in `directory`, for failure messages."""
    parts = []
    for path in sorted(glob.glob(os.path.join(str(directory), "*.out"))):
        with open(path, encoding="utf-8", errors="replace") as handle:
            parts.append(f"--- {os.path.basename(path)}\n{handle.read()[-6000:]}")
    return "\n".join(parts) or "(no job output file)"


def rank_records(probe_dir) -> list[dict]:
    """What each rank saw (slurm_rank_probe.py), ordered by the backend's rank."""
    records = []
    for path in glob.glob(os.path.join(str(probe_dir), "rank-*.json")):
        with open(path, encoding="utf-8") as handle:
            records.append(json.load(handle))
    return sorted(records, key=lambda r: (r.get("backend") or r.get("detected") or {})
                  .get("rank", -1))
