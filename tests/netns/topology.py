"""A small "cluster" of network namespaces on one machine, for multi-host tests.

    login ns (launcher)  bridge hvt0 10.77.0.1/24
                           ├─ p0 ══ veth ══ hvt0 10.77.0.11/24   host ns PREFIX-h0
                           └─ p1 ══ veth ══ hvt0 10.77.0.12/24   host ns PREFIX-h1

Every device and address lives inside namespaces created here: the bridge sits in the
"login" namespace (where the launcher runs, like a head node) and each veth pair is
created from inside it, so the root namespace never sees a new interface or address and
parallel runs (with different name prefixes) cannot collide, even with equal subnets.
All hosts name their interface hvt0, like a cluster whose nodes all use eth0: horovodrun
looks for an interface name common to every host.

Like on a real cluster node, this machine's hostname resolves, inside each host namespace,
to that host's own address: /etc/netns/NS/hosts, which `ip netns exec` mounts over
/etc/hosts. Horovod 0.28's Gloo process-set contexts need that (they ignore
HOROVOD_GLOO_IFACE and bind to whatever the hostname resolves to; see
docs/multihost_test.md). Namespaces share the UTS namespace, so the name is the same in
each; only its address differs.

Run by hand (as root):  python3 tests/netns/topology.py up NAME [HOSTS]
                        python3 tests/netns/topology.py down NAME [HOSTS]
"""
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

SUBNET = "10.77.0.0/24"
IFACE = "hvt0"
LOGIN_ADDRESS = "10.77.0.1"
NETNS_ETC = "/etc/netns"


class NetnsUnavailable(RuntimeError):
    """The kernel or our privileges refuse namespaces, veths or bridges."""


@dataclass(frozen=True)
class Topology:
    prefix: str
    hosts: tuple[str, ...]        # addresses, one per host namespace
    host_namespaces: tuple[str, ...]
    hosts_files: bool = False     # /etc/netns/NS/hosts written (hostname -> own address)

    @property
    def login(self) -> str:
        return f"{self.prefix}-login"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.login,) + self.host_namespaces

    def hostfile_text(self, slots: int = 1) -> str:
        return "".join(f"{host} slots={slots}\n" for host in self.hosts)

    def exec_argv(self, namespace: str) -> list[str]:
        """Prefix that runs a command inside `namespace`."""
        return ["ip", "netns", "exec", namespace]


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed ({proc.returncode}): "
                               f"{proc.stderr.strip()}")


def topology(prefix: str, n_hosts: int = 2) -> Topology:
    return Topology(prefix, tuple(f"10.77.0.{11 + i}" for i in range(n_hosts)),
                    tuple(f"{prefix}-h{i}" for i in range(n_hosts)))


def create(prefix: str, n_hosts: int = 2) -> Topology:
    """Builds the namespaces; on any failure removes what it made and raises
    NetnsUnavailable with the kernel's reason."""
    topo = topology(prefix, n_hosts)
    try:
        for ns in topo.namespaces:
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", topo.login, "link", "add", IFACE, "type", "bridge")
        _ip("-n", topo.login, "addr", "add", f"{LOGIN_ADDRESS}/24", "dev", IFACE)
        _ip("-n", topo.login, "link", "set", IFACE, "up")
        for i, (host, ns) in enumerate(zip(topo.hosts, topo.host_namespaces)):
            port = f"p{i}"
            _ip("-n", topo.login, "link", "add", port, "type", "veth",
                "peer", "name", IFACE, "netns", ns)
            _ip("-n", topo.login, "link", "set", port, "master", IFACE, "up")
            _ip("-n", ns, "addr", "add", f"{host}/24", "dev", IFACE)
            _ip("-n", ns, "link", "set", IFACE, "up")
    except NetnsUnavailable:
        destroy(topo)
        raise
    return Topology(topo.prefix, topo.hosts, topo.host_namespaces, _write_hosts_files(topo))


def _hosts_file(ns: str) -> str:
    return os.path.join(NETNS_ETC, ns, "hosts")


def _write_hosts_files(topo: Topology) -> bool:
    """False when /etc/netns is not writable (then only the Gloo test needs to skip)."""
    name = socket.gethostname()
    try:
        for host, ns in zip(topo.hosts, topo.host_namespaces):
            os.makedirs(os.path.dirname(_hosts_file(ns)), exist_ok=True)
            with open(_hosts_file(ns), "w", encoding="utf-8") as handle:
                handle.write(f"127.0.0.1 localhost\n::1 localhost\n{host} {name}\n")
    except OSError:
        _remove_hosts_files(topo)
        return False
    return True


def _remove_hosts_files(topo: Topology) -> None:
    for ns in topo.host_namespaces:
        path = _hosts_file(ns)
        for remove, target in ((os.remove, path), (os.rmdir, os.path.dirname(path))):
            try:
                remove(target)
            except OSError:
                pass
    try:
        os.rmdir(NETNS_ETC)  # only succeeds when no other run still has files there
    except OSError:
        pass


def _pids_in(namespace: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                          text=True, check=False)
    return [int(word) for word in proc.stdout.split() if word.isdigit()]


def destroy(topo: Topology) -> list[str]:
    """Kills what still runs inside our namespaces (only processes this test started
    there) and deletes them; the veths and the bridge go with them. Returns problems."""
    problems = []
    for ns in topo.namespaces:
        for pid in _pids_in(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0 and "No such file" not in proc.stderr:
            problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
    _remove_hosts_files(topo)
    return problems


def link_bytes(namespace: str, iface: str = IFACE) -> tuple[int, int]:
    """(rx_bytes, tx_bytes) of `iface` inside `namespace`."""
    proc = subprocess.run(["ip", "-n", namespace, "-s", "-j", "link", "show", iface],
                          capture_output=True, text=True, check=True)
    stats = json.loads(proc.stdout)[0]["stats64"]
    return stats["rx"]["bytes"], stats["tx"]["bytes"]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in ("up", "down"):
        print("usage: topology.py up|down NAME [HOSTS]", file=sys.stderr)
        return 2
    n_hosts = int(argv[2]) if len(argv) == 3 else 2
    if argv[0] == "up":
        topo = create(argv[1], n_hosts)
        print(f"# namespaces: {' '.join(topo.namespaces)}; launch from {topo.login}")
        print(topo.hostfile_text(), end="")
        return 0
    problems = destroy(topology(argv[1], n_hosts))
    print("\n".join(problems) or "removed", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
