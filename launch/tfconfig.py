"""TF_CONFIG for MultiWorkerMirroredStrategy workers. Standard library only.

One worker per slot: a host with slots=N runs N workers listening on ports
port_base .. port_base+N-1 (port = port_base + local rank). Workers are listed host by
host, in hostfile order, which is also the order in which `mpirun --map-by slot`,
horovodrun and `srun --distribution=block` hand out ranks; so worker index == rank.

The contract with the worker side (horovod_train/env.py, names in launch/contract.py),
for ranks started by mpirun/horovodrun/srun that do not get a TF_CONFIG of their own:
    ENV_HOSTS            'h1:2,h2:2' (hosts and slots, rank order)
    ENV_MWMS_PORT_BASE   '12345'
The worker builds the same TF_CONFIG from those and its own rank.
"""
import json
import re

from launch import contract
from launch.errors import launch_error
from launch.hostfile import LOCAL_NAMES, Host, check_hostname

# The contract's names, under the names this module has always exported.
ENV_HOSTS = contract.ENV_HOSTS
ENV_PORT_BASE = contract.ENV_MWMS_PORT_BASE
DEFAULT_PORT_BASE = contract.DEFAULT_MWMS_PORT_BASE
TASK_TYPES = ("worker",)
_ADDRESS = re.compile(r"^(?:\[([^\]]+)\]|([^:\[\]]+)):([0-9]{1,5})$")


def check_port_range(port_base, width: int, flag: str = "--mwms_port_base") -> int:
    """Ports base .. base+width-1 must all be unprivileged, valid ports."""
    if (isinstance(port_base, bool) or not isinstance(port_base, int)
            or port_base < 1024 or port_base + width - 1 > 65535):
        raise launch_error(flag, port_base, f"a port from 1024 to {65536 - width} "
                           f"({width} workers per host use {width} ports from the base)",
                           f"{flag} {DEFAULT_PORT_BASE}")
    return port_base


def check_port_base(port_base, hosts: list[Host], flag: str = "--mwms_port_base") -> int:
    """A host with N slots uses ports base .. base+N-1."""
    return check_port_range(port_base, max((h.slots for h in hosts), default=1), flag)


def worker_addresses(hosts: list[Host], port_base: int = DEFAULT_PORT_BASE) -> list[str]:
    """['h1:12345', 'h1:12346', 'h2:12345', ...]: one address per slot, rank order."""
    check_port_base(port_base, hosts)
    return [host.address(port_base + local) for host in hosts for local in range(host.slots)]


def _check_address(address, where: str) -> str:
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if not match:
        raise launch_error(where, address, "'host:port' (IPv6 as '[addr]:port')",
                           "node01:12345")
    check_hostname(match.group(1) or match.group(2), where)
    if not 1 <= int(match.group(3)) <= 65535:
        raise launch_error(where, address, "a port from 1 to 65535", "node01:12345")
    return address


def address_key(address: str) -> tuple[str, int]:
    """What makes two 'host:port' strings one listening address: host names are
    case-blind, every name of this machine is one host, and '012' is port 12."""
    host, _, port = str(address).rpartition(":")
    host = host.strip("[]").lower()
    if host in LOCAL_NAMES or host.startswith("127."):
        host = "localhost"
    return host, int(port) if port.isdigit() else -1


def find_duplicate(addresses) -> tuple[int, int] | None:
    """(first, second) indexes of the first address listed twice, else None."""
    seen: dict[tuple[str, int], int] = {}
    for index, address in enumerate(addresses):
        key = address_key(address)
        if key in seen:
            return seen[key], index
        seen[key] = index
    return None


def tf_config(hosts_ports: list[str], index: int, task_type: str = "worker") -> dict:
    """The TF_CONFIG dict (JSON-able) for task `index` of a workers-only cluster."""
    if task_type not in TASK_TYPES:
        raise launch_error("task_type", task_type, "'worker' (MWMS here uses workers "
                           "only; worker 0 acts as chief)", "task_type='worker'")
    if not hosts_ports:
        raise launch_error("TF_CONFIG cluster", hosts_ports, "at least one 'host:port'",
                           "['node01:12345', 'node02:12345']")
    addresses = [_check_address(a, f"TF_CONFIG worker {i}") for i, a in enumerate(hosts_ports)]
    duplicate = find_duplicate(addresses)
    if duplicate:
        first, second = duplicate
        raise launch_error(f"TF_CONFIG workers {first} and {second}", addresses[second],
                           f"distinct host:port addresses ({addresses[first]!r} and "
                           f"{addresses[second]!r} are one address: a worker would meet "
                           "itself and wait forever)", "['node01:12345', 'node01:12346']")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(addresses):
        raise launch_error("--index", index, f"a worker index from 0 to {len(addresses) - 1}",
                           "--index 0")
    return {"cluster": {task_type: addresses}, "task": {"type": task_type, "index": index}}


def tf_config_for_worker(hosts: list[Host], index: int,
                         port_base: int = DEFAULT_PORT_BASE) -> dict:
    """TF_CONFIG of worker `index` for a hostfile's hosts."""
    return tf_config(worker_addresses(hosts, port_base), index)


def all_tf_configs(hosts: list[Host], port_base: int = DEFAULT_PORT_BASE) -> list[dict]:
    addresses = worker_addresses(hosts, port_base)
    return [tf_config(addresses, index) for index in range(len(addresses))]


def to_json(config: dict) -> str:
    """Compact, key-sorted JSON: stable to print, diff and test."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def worker_env_contract(hosts: list[Host], port_base: int) -> dict[str, str]:
    """The env that lets a launched rank derive TF_CONFIG itself (see module doc)."""
    check_port_base(port_base, hosts)
    # Same 'host:N' form as -H (IPv6 in brackets), so parse_hosts_arg reads it back.
    listed = ",".join(f"[{h.name}]:{h.slots}" if h.is_ipv6 else f"{h.name}:{h.slots}"
                      for h in hosts)
    return {ENV_HOSTS: listed, ENV_PORT_BASE: str(port_base)}
