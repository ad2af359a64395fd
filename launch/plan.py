"""Pure builders: argv lists for horovodrun, OpenMPI mpirun, MPICH mpiexec and srun.

Nothing here reads the process environment or starts anything; launch/__main__.py is
the only module that spawns. Every builder validates what it puts on the command line
and returns a fresh list[str] (never a shell string): the executor hands it to
subprocess without a shell, and the dry run prints it with shlex.join.

Remote launchers (ssh, orted, Hydra proxies) may hand parts of the command line to a
remote shell, so the values accepted here are deliberately narrow: host names and
env names are validated upstream, paths and option values must not start with '-'
nor hold control characters, and MCA values use a shell-inert character set.
"""
import re

from launch.envvars import check_env_name
from launch.errors import launch_error
from launch.hostfile import (MAX_HOSTS, MAX_SLOTS, Host, format_horovodrun_hosts,
                             format_mpich_hosts, format_openmpi_hosts, total_slots)

CONTROLLERS = ("gloo", "mpi")
SRUN_MPI = ("pmix", "pmix_v3", "pmix_v4", "pmi2", "none")
SRUN_CPU_BIND = ("none", "cores", "sockets", "threads", "rank", "ldoms")
SRUN_DISTRIBUTION = ("block", "cyclic")
BIND_TO = ("none", "core", "socket", "numa", "hwthread", "board", "l3cache")
HYDRA_LAUNCHERS = ("ssh", "rsh", "fork", "slurm")
MAX_RANKS = MAX_HOSTS * MAX_SLOTS
# Shown in errors and --help; tests/unit/test_launch_docs.py checks its flags are real.
COMMAND_EXAMPLE = "-- python -m horovod_train --max_steps=100"
# Launch flags for settings the trainer has too carry the trainer's names (one vocabulary);
# these two are named in messages from several modules.
PORT_BASE_FLAG = "--mwms_port_base"
TIMELINE_FLAG = "--horovod_timeline_file"  # a path; the trainer's --horovod_timeline picks one

_MAP_BY = re.compile(r"^(slot|node|core|socket|numa|hwthread|board|l3cache"
                     r"|ppr:[0-9]{1,4}:(node|socket|numa|core|l3cache))(:[A-Za-z0-9=,]+)?$")
_MCA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,127}$")
# No quotes, '$', '`', ';', '&', '|', '<', '>', '(', ')', '\\' or newlines: orted
# start-up passes MCA values through the remote shell.
_MCA_VALUE = re.compile(r"^[A-Za-z0-9_.,:/^@%+= -]{1,256}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,14}$")


# ----------------------------------------------------------------------------- checks

def check_command(command) -> list[str]:
    """The program to run on every rank, e.g. ['python', '-m', 'horovod_train']."""
    example = COMMAND_EXAMPLE
    if isinstance(command, str) or not command:
        raise launch_error("command", command, "the program and its arguments after '--'",
                           example)
    for arg in command:
        if not isinstance(arg, str) or "\x00" in arg:
            raise launch_error("command argument", arg, "text without NUL bytes", example)
    if command[0].startswith("-") or not command[0].strip():
        # Launchers would read a leading '-' as one of their own options.
        raise launch_error("command", command[0], "a program name, not an option", example)
    return list(command)


def check_count(value, what: str, upper: int = MAX_RANKS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise launch_error(what, value, f"a whole number from 1 to {upper}", f"{what} 4")
    return value


def check_np(np, hosts: list[Host], oversubscribe: bool = False, flag: str = "-np") -> int:
    """np must fit the hosts' slots (unless oversubscribing)."""
    check_count(np, flag)
    slots = total_slots(hosts)
    if hosts and np > slots and not oversubscribe:
        raise launch_error(flag, np, f"at most {slots} (the total slots of the hosts); "
                           "add slots or pass --oversubscribe", f"{flag} {slots}")
    return np


def check_option_value(value, flag: str, example: str) -> str:
    """Paths and free-form option values: no leading '-', no control characters."""
    if (not isinstance(value, str) or not value or value.startswith("-")
            or any(ord(char) < 32 or ord(char) == 127 for char in value)):
        raise launch_error(flag, value, "a non-empty value without control characters that "
                           "does not start with '-'", example)
    return value


def check_choice(value, choices, flag: str) -> str:
    if value not in choices:
        raise launch_error(flag, value, "one of " + ", ".join(choices), f"{flag} {choices[0]}")
    return value


def check_number(value, flag: str, low: float, high: float, integer: bool = False) -> str:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "whole number" if integer else "number"
        raise launch_error(flag, value, f"a {kind} from {low} to {high}", f"{flag} {high // 2}")
    return str(value)


def _host_args(hosts, hostfile, flag_hosts, flag_file, fmt, np) -> list[str]:
    """Either `flag_file PATH` or `flag_hosts h1:N,...` (localhost:np when neither)."""
    if hostfile is not None:
        return [flag_file, check_option_value(hostfile, flag_file, "hostfiles/two_nodes")]
    return [flag_hosts, fmt(list(hosts) or [Host("localhost", min(np, MAX_SLOTS))])]


# ----------------------------------------------------------------------------- horovodrun

def horovodrun_argv(command, *, np: int, hosts=(), hostfile=None, controller="gloo",
                    network_interfaces=(), fusion_threshold_mb=None, cycle_time_ms=None,
                    timeline_filename=None, timeline_mark_cycles=False, start_timeout_s=None,
                    ssh_port=None, ssh_identity_file=None, output_filename=None,
                    verbose=False, executable="horovodrun") -> list[str]:
    """horovodrun -np N (-H h:n,... | --hostfile F) --gloo|--mpi [knobs] command..."""
    check_np(np, list(hosts))
    argv = [executable, "-np", str(np)]
    argv += _host_args(hosts, hostfile, "-H", "--hostfile", format_horovodrun_hosts, np)
    argv.append("--" + check_choice(controller, CONTROLLERS, "--controller"))
    if network_interfaces:
        names = [_check_ifname(name) for name in network_interfaces]
        argv += ["--network-interfaces", ",".join(names)]
    if fusion_threshold_mb is not None:
        argv += ["--fusion-threshold-mb",
                 check_number(fusion_threshold_mb, "--fusion_threshold_mb", 0, 65536, True)]
    if cycle_time_ms is not None:
        argv += ["--cycle-time-ms", check_number(cycle_time_ms, "--cycle_time_ms", 0, 10000)]
    if timeline_filename is not None:
        argv += ["--timeline-filename",
                 check_option_value(timeline_filename, TIMELINE_FLAG, "runs/timeline.json")]
        if timeline_mark_cycles:
            argv.append("--timeline-mark-cycles")
    if start_timeout_s is not None:
        argv += ["--start-timeout", str(check_count(start_timeout_s, "--start_timeout_s", 86400))]
    if ssh_port is not None:
        argv += ["-p", str(check_count(ssh_port, "--ssh_port", 65535))]
    if ssh_identity_file is not None:
        argv += ["-i", check_option_value(ssh_identity_file, "--ssh_identity_file",
                                          "~/.ssh/id_ed25519")]
    if output_filename is not None:
        argv += ["--output-filename",
                 check_option_value(output_filename, "--output_filename", "runs/logs")]
    if verbose:
        argv.append("--verbose")
    return argv + check_command(command)


def _check_ifname(name) -> str:
    if not isinstance(name, str) or not _IFNAME.match(name):
        raise launch_error("--network_interface", name, "a network interface name "
                           "(up to 15 letters, digits, '_', '.', '-')", "eth0 or ib0")
    return name


# ----------------------------------------------------------------------------- OpenMPI

def check_mca(mca) -> list[tuple[str, str]]:
    pairs = []
    for name, value in dict(mca or {}).items():
        if not isinstance(name, str) or not _MCA_NAME.match(name):
            raise launch_error("--mca name", name, "an MCA parameter name like btl_tcp_if_include",
                               "--mca btl_tcp_if_include=eth0")
        if not isinstance(value, str) or not _MCA_VALUE.match(value):
            raise launch_error(f"--mca {name}", value, "a value of letters, digits, spaces "
                               "and _.,:/^@%+=- only", "--mca btl=^openib")
        pairs.append((name, value))
    return pairs


def mpirun_argv(command, *, np: int, hosts=(), hostfile=None, forward_env=(),
                bind_to="none", map_by="slot", mca=None, as_root=False,
                oversubscribe=False, tag_output=False, executable="mpirun") -> list[str]:
    """OpenMPI: mpirun -np N -H/--hostfile --bind-to --map-by [-mca k v] [-x NAME] cmd.

    `-x NAME` (no '=value') makes mpirun copy the value from its own environment, so
    values never appear on any command line. `as_root` adds --allow-run-as-root,
    which OpenMPI requires in containers running as root.
    """
    check_np(np, list(hosts), oversubscribe)
    argv = [executable, "-np", str(np)]
    if as_root:
        argv.append("--allow-run-as-root")
    if oversubscribe:
        argv.append("--oversubscribe")
    argv += _host_args(hosts, hostfile, "-H", "--hostfile", format_openmpi_hosts, np)
    argv += ["--bind-to", check_choice(bind_to, BIND_TO, "--bind_to")]
    if not isinstance(map_by, str) or not _MAP_BY.match(map_by):
        raise launch_error("--map_by", map_by, "an OpenMPI mapping such as slot, node, "
                           "socket or ppr:4:node", "--map_by slot")
    argv += ["--map-by", map_by]
    for name, value in check_mca(mca):
        argv += ["-mca", name, value]
    if tag_output:
        argv.append("--tag-output")
    for name in forward_env:
        argv += ["-x", check_env_name(name, "-x")]
    return argv + check_command(command)


# ----------------------------------------------------------------------------- MPICH

def mpich_argv(command, *, np: int, hosts=(), hostfile=None, ppn=None, forward_env=(),
               bind_to=None, launcher=None, launcher_exec=None,
               executable="mpiexec") -> list[str]:
    """MPICH/Hydra: mpiexec -n N -hosts h:n,... | -f FILE [-ppn K] -genvlist A,B cmd."""
    check_np(np, list(hosts))
    argv = [executable, "-n", str(np)]
    argv += _host_args(hosts, hostfile, "-hosts", "-f", format_mpich_hosts, np)
    if ppn is not None:
        argv += ["-ppn", str(check_count(ppn, "--ppn", MAX_SLOTS))]
    names = [check_env_name(name, "-genvlist") for name in forward_env]
    if names:
        argv += ["-genvlist", ",".join(names)]
    if bind_to is not None:
        argv += ["-bind-to", check_choice(bind_to, BIND_TO, "--bind_to")]
    if launcher is not None:
        argv += ["-launcher", check_choice(launcher, HYDRA_LAUNCHERS, "--hydra_launcher")]
    if launcher_exec is not None:
        argv += ["-launcher-exec", check_option_value(launcher_exec, "--launcher_exec",
                                                      "/usr/bin/ssh")]
    return argv + check_command(command)


# ----------------------------------------------------------------------------- Slurm

def srun_argv(command, *, ntasks=None, nodes=None, ntasks_per_node=None, mpi="pmix",
              gpus_per_task=None, cpus_per_task=None, cpu_bind=None, distribution="block",
              kill_on_bad_exit=True, export="ALL", executable="srun") -> list[str]:
    """srun --mpi=pmix [--nodes] [--ntasks] [--ntasks-per-node] ... command...

    --distribution=block keeps a node's tasks on consecutive ranks, the order our
    TF_CONFIG lists workers in; --kill-on-bad-exit ends the step when one rank dies,
    instead of leaving the others blocked in a collective.
    """
    argv = [executable, "--mpi=" + check_choice(mpi, SRUN_MPI, "--mpi")]
    for flag, value, upper in (("--nodes", nodes, MAX_HOSTS), ("--ntasks", ntasks, MAX_RANKS),
                               ("--ntasks-per-node", ntasks_per_node, MAX_SLOTS),
                               ("--gpus-per-task", gpus_per_task, 64),
                               ("--cpus-per-task", cpus_per_task, MAX_SLOTS)):
        if value is not None:
            argv.append(f"{flag}={check_count(value, flag, upper)}")
    if cpu_bind is not None:
        argv.append("--cpu-bind=" + check_choice(cpu_bind, SRUN_CPU_BIND, "--cpu_bind"))
    argv.append("--distribution=" + check_choice(distribution, SRUN_DISTRIBUTION,
                                                 "--distribution"))
    if kill_on_bad_exit:
        argv.append("--kill-on-bad-exit=1")
    if export is not None:
        argv.append("--export=" + check_choice(export, ("ALL", "NONE"), "--export"))
    return argv + check_command(command)
