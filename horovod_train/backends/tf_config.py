"""TF_CONFIG for the mwms backend: validated when given, derived when not. TF-free.

Derivation follows the launcher that started us:
  - srun: the step's node list and tasks per node (SLURM_STEP_*, expanded here, no
    scontrol needed), in srun's block order;
  - mpirun / MPICH: an allgather of hostnames over MPI (mpi4py);
  - horovodrun with every rank on this host: localhost.
Worker i listens on port_base + its local rank, so ports are predictable per host.
"""
import collections
import errno
import json
import socket
import time

from horovod_train import env as env_lib
from horovod_train.errors import UsageError
from launch import contract, ports
from launch.redact import redact
from launch.tfconfig import address_key, find_duplicate

_EXAMPLE = ('{"cluster": {"worker": ["host1:23456", "host2:23456"]}, '
            '"task": {"type": "worker", "index": 0}}')


def _bad(field: str, received, expected: str) -> UsageError:
    return UsageError(f"TF_CONFIG {field}: received {received!r}; expected {expected}. "
                      f"Fix: set TF_CONFIG like {_EXAMPLE}, or unset it to derive it from the "
                      f"launcher")


def validate(raw: str) -> dict:
    """Parses TF_CONFIG; every failure names the field that is wrong."""
    try:
        config = json.loads(raw)
    except ValueError as err:
        raise _bad("(JSON)", redact(raw)[:80], f"valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise _bad("(top level)", config, "a JSON object")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not isinstance(cluster.get("worker"), list) \
            or not cluster["worker"]:
        raise _bad("cluster.worker", cluster, "a non-empty list of host:port")
    for address in cluster["worker"]:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _bad("cluster.worker", address, "host:port with a port in 1..65535")
    _refuse_duplicates(cluster["worker"])
    if set(cluster) - {"worker"}:
        raise _bad("cluster", sorted(cluster), "only 'worker' tasks (no chief/ps/evaluator)")
    task = config.get("task")
    if not isinstance(task, dict) or task.get("type") != "worker":
        raise _bad("task.type", (task or {}).get("type") if isinstance(task, dict) else task,
                   "'worker'")
    index = task.get("index")
    if not isinstance(index, int) or not 0 <= index < len(cluster["worker"]):
        raise _bad("task.index", index, f"an integer in [0, {len(cluster['worker'])})")
    return config


def _refuse_duplicates(workers: list) -> None:
    """One address twice: that worker meets itself in the rendezvous and MWMS then
    waits forever for a peer that is itself. Refused before any port is opened."""
    duplicate = find_duplicate([str(w) for w in workers])
    if duplicate is None:
        return
    first, second = duplicate
    a, b = str(workers[first]), str(workers[second])
    received = f"{a!r} twice" if a == b else f"{a!r} and {b!r} (one address)"
    host, port = address_key(a)
    raise UsageError(f"TF_CONFIG cluster.worker: received {received}, for workers {first} and "
                     f"{second}; expected a distinct host:port for every worker (a worker "
                     f"listed twice meets itself and waits forever). Fix: give each worker its "
                     f"own port, e.g. '{host}:{port}' and '{host}:{port + 1}'")


def _config(hosts: list[str], index: int, port_base: int) -> dict:
    """Workers in rank order; each host's workers get consecutive ports."""
    seen = {}
    workers = []
    for host in hosts:
        workers.append(f"{host}:{port_base + seen.get(host, 0)}")
        seen[host] = seen.get(host, 0) + 1
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


def _hosts_from_mpi(size: int) -> list[str]:
    from mpi4py import MPI  # under mpirun only; initialises MPI for this exchange
    hosts = MPI.COMM_WORLD.allgather(socket.gethostname())
    if len(hosts) != size:
        raise UsageError(f"MPI world has {len(hosts)} ranks but the launcher announced {size}")
    return hosts


def _hosts_from_slurm(environ) -> list[str]:
    """Every rank's node, from the srun step's own variables (env.slurm_step)."""
    step = env_lib.slurm_step(environ)
    if step.rank != step.block_rank:
        raise UsageError(
            f"srun task layout: received rank {step.rank} on node {step.node_index} "
            f"({step.nodes[step.node_index]}) as its local task {step.local_rank}; expected "
            f"block distribution (rank {step.block_rank} there), the order the TF_CONFIG workers "
            f"are listed in. Fix: srun --distribution=block (the script `python -m launch "
            f"slurm` renders passes it), or set TF_CONFIG yourself")
    return step.hosts()


def _hosts_from_launcher_list(value: str, size: int) -> list[str]:
    """HOROVOD_TRAIN_HOSTS ("h1:2,h2:2", set by `python -m launch`): ranks fill hosts in order."""
    from launch.hostfile import parse_hosts_arg
    hosts = [h.name for h in parse_hosts_arg(value, flag=contract.ENV_HOSTS)
             for _ in range(h.slots)]
    if len(hosts) < size:
        raise UsageError(f"{contract.ENV_HOSTS}: received {value!r} ({len(hosts)} slots); expected "
                         f"at least {size} slots. Fix: list every host with its slot count")
    return hosts[:size]


def _port_base(environ, default: int, width: int) -> int:
    """HOROVOD_TRAIN_MWMS_PORT_BASE (set by `python -m launch`) wins over the flag. In a
    Slurm job, a --mwms_port_base left at its default gives way to the job's own base
    (contract.slurm_port_base: two jobs on one node must not share ports); `width` is
    the most workers any host runs, the same number on every rank."""
    raw = environ.get(contract.ENV_MWMS_PORT_BASE)
    if raw is None:
        job_id = env_lib.slurm_job_id(environ)
        if job_id is not None and default == contract.DEFAULT_MWMS_PORT_BASE:
            return contract.slurm_port_base(job_id, width)
        return default
    if not raw.isdigit() or not 1024 <= int(raw) <= 65535:
        raise UsageError(f"environment variable {contract.ENV_MWMS_PORT_BASE}: received {raw!r}; "
                         f"expected a port from 1024 to 65535. Fix: unset it to use "
                         f"--mwms_port_base, or set it to a free port such as "
                         f"{contract.DEFAULT_MWMS_PORT_BASE}")
    return int(raw)


def resolve_tf_config(environ, port_base: int) -> dict:
    raw = environ.get(contract.ENV_TF_CONFIG)
    if raw:
        return validate(raw)
    info = env_lib.launch_info(environ)
    if environ.get(contract.ENV_HOSTS) and info.is_distributed_launch:
        hosts = _hosts_from_launcher_list(environ[contract.ENV_HOSTS], info.size)
    elif info.launcher == "srun":
        hosts = _hosts_from_slurm(environ)
    elif info.launcher in ("mpirun", "mpich"):
        hosts = _hosts_from_mpi(info.size)
    elif info.launcher == "horovodrun" and info.local_size == info.size:
        hosts = ["localhost"] * info.size
    elif info.launcher == "none":
        hosts = ["localhost"]  # a single worker
    else:
        raise UsageError("--backend=mwms under horovodrun across hosts: received no TF_CONFIG; "
                         "expected TF_CONFIG or a launcher we can derive it from. Fix: launch "
                         "with mpirun or srun, or set TF_CONFIG ('python -m launch tf-config')")
    width = max(collections.Counter(hosts).values())
    config = _config(hosts, info.rank, _port_base(environ, port_base, width))
    _refuse_duplicates(config["cluster"]["worker"])  # e.g. 'localhost' and '127.0.0.1'
    return config


def rendezvous(workers: list[str], index: int, timeout_s: float):
    """Meets every peer on its TF_CONFIG port before the strategy starts.

    MWMS blocks without a word while a peer is missing, so we meet first: listen on
    our own port, connect to every peer, and stay listening until every peer has
    connected to us (each peer keeps trying while we listen, so all finish). Then the
    listener closes and the strategy's server takes the same port. A port another
    server listens on is named with its holder at once (bind_listener); a missing peer
    is named when timeout_s runs out.
    """
    host, _, port = workers[index].rpartition(":")
    deadline = time.monotonic() + timeout_s
    listener = bind_listener(int(port), workers[index], index, deadline)
    try:
        unreached = {w for i, w in enumerate(workers) if i != index}
        callers = 0
        while unreached or callers < len(workers) - 1:
            unreached = {w for w in unreached if not _touch(w)}
            callers += _accept_all(listener)
            if time.monotonic() > deadline:
                missing = ", ".join(sorted(unreached)) or \
                    f"{len(workers) - 1 - callers} peer(s) that never connected to {workers[index]}"
                raise UsageError(
                    f"mwms: cannot reach worker(s) {missing} after {timeout_s:.0f} s "
                    f"(--collective_timeout_s); expected every worker in TF_CONFIG to be running. "
                    f"Fix: start them, or correct their addresses")
            time.sleep(0.2)
    finally:
        listener.close()


def bind_listener(port: int, address: str, index: int, deadline: float) -> socket.socket:
    """Our port, listening. Held by an outgoing connection (ours or a peer's may draw it
    as its source port when the port lies in the ephemeral range), it is retried until
    `deadline`: that holder ends on its own. Held by a listening server, or still held
    at the deadline: one line naming the holder at once, since waiting would not help
    (a busy port used to cost the whole --collective_timeout_s in silence, issue 46)."""
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("", port))
            break
        except OSError as err:
            listener.close()
            if err.errno != errno.EADDRINUSE or time.monotonic() >= deadline or \
                    ports.is_listened_on(port):
                raise _port_in_use(port, address, index, err) from None
        time.sleep(0.25)
    listener.listen(64)
    listener.setblocking(False)
    return listener


def _port_in_use(port: int, address: str, index: int, err: OSError) -> UsageError:
    holder = ports.port_holder(port) if err.errno == errno.EADDRINUSE else None
    listening = err.errno == errno.EADDRINUSE and ports.is_listened_on(port)
    held = (", by a server listening there" if listening else "") + \
        (f", held by {holder}" if holder else "")
    return UsageError(f"TF_CONFIG cluster.worker[{index}]: port {port} of {address} is in "
                      f"use ({err.strerror}{held}); expected a free port. Fix: pick another port "
                      f"(--mwms_port_base, or edit TF_CONFIG) or stop what holds it")


def _accept_all(listener) -> int:
    """Accepts pending peers; the peer closes first, so TIME_WAIT stays on its side."""
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def _touch(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def local_position(workers: list[str], index: int) -> tuple[int, int]:
    return env_lib.local_position([w.rpartition(":")[0] for w in workers], index)
