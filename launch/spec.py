"""From a launch request (LaunchSpec) to a LaunchPlan: processes, argv and env. Pure.

build_plan() takes the caller's environment as an argument instead of reading
os.environ, so the same request always gives the same plan and tests need no
monkeypatching. The plan holds only the env *additions*; the executor layers them
over its own environment.
"""
from dataclasses import dataclass, field

from launch import contract, plan, ports, tfconfig
from launch.envvars import (check_env_name, check_env_value, cpu_sharing_env,
                            forwarded_names, unset_only)
from launch.errors import launch_error
from launch.hostfile import MAX_SLOTS, Host, is_local_only, total_slots

BACKENDS = contract.LAUNCHED_BACKENDS
LAUNCHERS = contract.MPI_STYLE_LAUNCHERS + ("local",)
MPI_LAUNCHERS = tuple(name for name in contract.MPI_STYLE_LAUNCHERS if name != "horovodrun")


@dataclass(frozen=True)
class Process:
    """One process to start: argv plus env additions (sorted name/value pairs)."""
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class LaunchPlan:
    processes: tuple[Process, ...]
    launcher: str
    notes: tuple[str, ...] = ()
    # Ranks the processes start between them: one launcher process (horovodrun, mpirun,
    # srun) starts them all. None: srun without -np, one per task of the allocation.
    ranks: int | None = None


@dataclass(frozen=True)
class HorovodKnobs:
    """Horovod tuning: horovodrun flags, or HOROVOD_* env under other launchers."""
    fusion_threshold_mb: int | None = None
    cycle_time_ms: float | None = None
    timeline_filename: str | None = None
    network_interfaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchSpec:
    """What the user asked for; see launch/cli.py for the flags that fill it."""
    backend: str
    command: tuple[str, ...]
    launcher: str | None = None          # None: horovodrun for horovod; local/mpirun for mwms
    hosts: tuple[Host, ...] = ()
    hostfile: str | None = None          # where hosts came from (mpirun reads it for IPv6)
    np: int | None = None                # None: every slot of the hosts
    controller: str | None = None        # horovodrun only: gloo (default) or mpi
    port_base: int = contract.DEFAULT_MWMS_PORT_BASE
    env: tuple[tuple[str, str], ...] = ()
    forward: tuple[str, ...] = ()
    cores_per_host: int | None = None    # set: apply cpu_sharing_env defaults
    oversubscribe: bool = False
    bind_to: str = "none"
    map_by: str = "slot"
    mca: tuple[tuple[str, str], ...] = ()
    launch_agent: str | None = None      # replaces ssh (mpirun plm_rsh_agent, mpich -launcher-exec)
    srun_mpi: str = "pmix"
    gpus_per_task: int | None = None
    as_root: bool = False
    horovod: HorovodKnobs = field(default_factory=HorovodKnobs)
    ephemeral_ports: tuple[int, int] | None = None  # this machine's ip_local_port_range


def count(number: int, noun: str) -> str:
    """`1 rank`, `16 ranks`, `2 processes`: the dry run's counts, singular for one."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {noun}" + ("es" if noun.endswith("s") else "s")


def resolve_launcher(spec: LaunchSpec) -> str:
    if spec.launcher is not None:
        return plan.check_choice(spec.launcher, LAUNCHERS, "--launcher")
    if spec.backend == "horovod":
        return "horovodrun"
    return "local" if is_local_only(list(spec.hosts) or [Host("localhost")]) else "mpirun"


def first_ranks(hosts: list[Host], np: int) -> list[Host]:
    """The hosts and slots the first `np` ranks occupy when ranks fill hosts in order."""
    used, left = [], np
    for host in hosts:
        if left <= 0:
            break
        take = min(host.slots, left)
        used.append(Host(host.name, take))
        left -= take
    return used


def _hosts_and_np(spec: LaunchSpec, launcher: str) -> tuple[list[Host], int | None]:
    hosts = list(spec.hosts)
    if launcher == "srun":
        if hosts or spec.hostfile:
            raise launch_error("--hostfile/-H", spec.hostfile or "hosts", "no host list with "
                               "--launcher srun (srun uses the Slurm allocation's nodes)",
                               "salloc -N 2 --ntasks-per-node 8, then --launcher srun -np 16")
        return [], None if spec.np is None else plan.check_count(spec.np, "-np")
    if not hosts:
        if spec.np is None:
            raise launch_error("-np", None, "-np N, or hosts via --hostfile/-H",
                               "-np 2 (runs on localhost:2)")
        hosts = [Host("localhost", plan.check_count(spec.np, "-np", MAX_SLOTS))]
    np = total_slots(hosts) if spec.np is None else spec.np
    plan.check_np(np, hosts, spec.oversubscribe)
    return hosts, np


def _env_additions(spec: LaunchSpec, launcher: str, hosts, np, environ) -> dict[str, str]:
    """cpu and Open MPI defaults (only where unset) < Horovod knob env < worker contract < --env."""
    explicit = {}
    for name, value in spec.env:
        explicit[check_env_name(name, "--env")] = check_env_value(value, f"--env {name}")
    env: dict[str, str] = {}
    if spec.cores_per_host is not None:
        ranks = max((h.slots for h in first_ranks(hosts, np or 1)), default=1)
        env.update(unset_only(cpu_sharing_env(spec.cores_per_host, ranks), environ, explicit))
    knobs = spec.horovod
    if spec.backend == "horovod" and launcher != "horovodrun":
        if knobs.fusion_threshold_mb is not None:
            mb = plan.check_number(knobs.fusion_threshold_mb, "--fusion_threshold_mb",
                                   0, 65536, integer=True)
            env["HOROVOD_FUSION_THRESHOLD"] = str(int(mb) * 1024 * 1024)
        if knobs.cycle_time_ms is not None:
            env["HOROVOD_CYCLE_TIME"] = plan.check_number(knobs.cycle_time_ms,
                                                          "--cycle_time_ms", 0, 10000)
        if knobs.timeline_filename is not None:
            env["HOROVOD_TIMELINE"] = plan.check_option_value(
                knobs.timeline_filename, plan.TIMELINE_FLAG, "runs/timeline.json")
    if spec.backend == "mwms" and launcher != "local":
        if launcher == "srun":
            port_base = _srun_port_base(spec.port_base, np, environ)
            tfconfig.check_port_base(port_base, [], plan.PORT_BASE_FLAG)
            env[contract.ENV_MWMS_PORT_BASE] = str(port_base)
        else:
            env.update(tfconfig.worker_env_contract(first_ranks(hosts, np), spec.port_base))
    if launcher == "horovodrun" and spec.controller == "mpi":  # it runs Open MPI's mpirun
        daemon_env = {contract.open_mpi_mca_env_name(name): value
                      for name, value in contract.OPEN_MPI_DAEMON_MCA.items()}
        env.update(unset_only(daemon_env, environ, explicit))
        if spec.as_root:  # mpirun refuses root without these
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(explicit)
    return env


def _check_controller(spec: LaunchSpec, launcher: str, np) -> str | None:
    if spec.controller is not None:
        plan.check_choice(spec.controller, plan.CONTROLLERS, "--controller")
    if spec.backend == "mwms":
        return None
    if launcher in MPI_LAUNCHERS and spec.controller == "gloo":
        raise launch_error("--controller", "gloo", f"mpi with --launcher {launcher} (Gloo "
                           "needs horovodrun's rendezvous)",
                           "--launcher horovodrun --controller gloo")
    if launcher == "local" and np != 1:
        raise launch_error("--launcher", "local", "horovodrun, mpirun or srun for more than "
                           "one Horovod rank (local starts one process without rendezvous)",
                           "--launcher horovodrun -np 2")
    return spec.controller or ("gloo" if launcher == "horovodrun" else "mpi")


def _srun_port_base(port_base: int, np: int, environ) -> int:
    """Inside a Slurm job, the default base gives way to the job's own, as in the sbatch
    script: two jobs on one node must not share MWMS ports. At most np tasks per node."""
    job_id = environ.get(contract.SLURM_JOB_ID, "")
    if port_base != contract.DEFAULT_MWMS_PORT_BASE or not job_id.isdigit():
        return port_base
    return contract.slurm_port_base(int(job_id), np)


def _launcher_argv(spec: LaunchSpec, launcher: str, hosts, np, env, environ) -> list[str]:
    command, knobs = list(spec.command), spec.horovod
    forward = forwarded_names(environ, spec.forward, env)
    mca = dict(spec.mca)
    # Launchers get the validated host list (-H), not the user's file: horovodrun's own
    # reader breaks on comments, bare hosts and 'host:N', OpenMPI's on 'host:N', and
    # what runs is then exactly what was checked. Only IPv6, which no -H list can
    # express, makes mpirun read the file itself.
    hostfile = None
    if launcher == "mpirun" and any(host.is_ipv6 for host in hosts):
        hostfile = spec.hostfile
    if launcher == "horovodrun":
        return plan.horovodrun_argv(
            command, np=np, hosts=hosts, hostfile=hostfile,
            controller=_check_controller(spec, launcher, np) or "gloo",
            network_interfaces=knobs.network_interfaces,
            fusion_threshold_mb=knobs.fusion_threshold_mb, cycle_time_ms=knobs.cycle_time_ms,
            timeline_filename=knobs.timeline_filename)
    if launcher == "mpirun":
        if spec.launch_agent is not None:
            mca["plm_rsh_agent"] = spec.launch_agent
        # Our daemon defaults, unless given with --mca, --env or the user's environment
        # (a -mca on the line would override the variable).
        mca = {**{name: value for name, value in contract.OPEN_MPI_DAEMON_MCA.items()
                  if contract.open_mpi_mca_env_name(name) not in {**environ, **env}},
               **mca}
        return plan.mpirun_argv(command, np=np, hosts=hosts, hostfile=hostfile,
                                forward_env=forward, bind_to=spec.bind_to, map_by=spec.map_by,
                                mca=mca, as_root=spec.as_root, oversubscribe=spec.oversubscribe)
    if launcher == "mpich":
        return plan.mpich_argv(command, np=np, hosts=hosts, forward_env=forward,
                               launcher_exec=spec.launch_agent,
                               bind_to=None if spec.bind_to == "none" else spec.bind_to)
    return plan.srun_argv(command, ntasks=np, mpi=spec.srun_mpi, gpus_per_task=spec.gpus_per_task)


def _local_processes(spec: LaunchSpec, hosts, np, env) -> list[Process]:
    """mwms by hand: one local process per worker, each with its own TF_CONFIG."""
    if not is_local_only(hosts):
        names = ",".join(h.name for h in hosts)
        raise launch_error("--launcher local", names, "localhost only (local starts "
                           "processes on this machine)", "--launcher mpirun for remote hosts")
    command = plan.check_command(list(spec.command))
    configs = tfconfig.all_tf_configs(first_ranks(hosts, np), spec.port_base)
    return [Process(tuple(command),
                    tuple(sorted({**env, contract.ENV_TF_CONFIG: tfconfig.to_json(c)}.items())))
            for c in configs]


def _check_local_ports(spec: LaunchSpec, hosts, np) -> None:
    """Workers on this machine must listen below its ephemeral range: in it, a peer's
    outgoing connection can take a worker's port before the worker binds it. Remote
    hosts' ranges are theirs, unknown here."""
    if spec.ephemeral_ports is None or not hosts or not is_local_only(hosts):
        return
    width = max(h.slots for h in first_ranks(hosts, np))
    low, high = spec.ephemeral_ports
    if ports.overlaps_ephemeral(spec.port_base, width, spec.ephemeral_ports):
        raise launch_error(plan.PORT_BASE_FLAG, spec.port_base, f"ports outside this machine's "
                           f"ephemeral range {low}-{high} (ip_local_port_range), where outgoing "
                           f"connections take ports at random; {width} workers use "
                           f"{spec.port_base}..{spec.port_base + width - 1}",
                           f"{plan.PORT_BASE_FLAG} {contract.DEFAULT_MWMS_PORT_BASE}")


def build_plan(spec: LaunchSpec, environ) -> LaunchPlan:
    """Validates `spec` completely and returns what to start; nothing is started here."""
    plan.check_choice(spec.backend, BACKENDS, "--backend")
    launcher = resolve_launcher(spec)
    hosts, np = _hosts_and_np(spec, launcher)
    if spec.backend == "mwms" and hosts and np > total_slots(hosts):
        raise launch_error("-np", np, f"at most {total_slots(hosts)} for mwms (one worker "
                           "and one port per slot, even with --oversubscribe)",
                           f"-np {total_slots(hosts)}, or add slots to the hosts")
    if spec.backend == "mwms" and launcher == "mpirun" and spec.map_by != "slot":
        raise launch_error("--map_by", spec.map_by, "slot for mwms (TF_CONFIG lists "
                           "workers host by host, in rank order)", "--map_by slot")
    _check_controller(spec, launcher, np)
    if spec.backend == "mwms":
        if hosts:  # checked here so that the message names launch's flag
            tfconfig.check_port_base(spec.port_base, first_ranks(hosts, np), plan.PORT_BASE_FLAG)
        _check_local_ports(spec, hosts, np)
    env = _env_additions(spec, launcher, hosts, np, environ)
    notes = []
    if spec.backend == "mwms" and launcher == "local":
        processes = _local_processes(spec, hosts, np, env)
        notes.append(f"{count(len(processes), 'MWMS worker')} on this machine, TF_CONFIG per "
                     f"process, ports {spec.port_base}..{spec.port_base + len(processes) - 1}")
    else:
        argv = _launcher_argv(spec, launcher, hosts, np, env, environ)
        processes = [Process(tuple(argv), tuple(sorted(env.items())))]
        if spec.backend == "mwms":
            notes.append("each rank derives TF_CONFIG from its rank and "
                         f"{contract.ENV_HOSTS}/{contract.ENV_MWMS_PORT_BASE} (or the Slurm env)")
    ranks = len(processes) if spec.backend == "mwms" and launcher == "local" else np
    return LaunchPlan(tuple(processes), launcher, tuple(notes), ranks)
