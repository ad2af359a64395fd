"""`python -m launch` command line: flags -> validated requests -> text or a plan.

This module only parses and formats; launch/__main__.py prints, writes and spawns.
Argument errors become LaunchError too, so every bad input ends the same way: one
line on stderr, exit code 2, nothing started.
"""
import argparse
import json
import math
import os
import shlex
from dataclasses import dataclass

from launch import contract, ports, sbatch, slurm_nodes, spec, tfconfig, trainer_check, usage
from launch import stacks as launch_stacks
from launch.argv import normalize_flag_names
from launch.errors import LaunchError, launch_error
from launch.hostfile import (Host, format_horovodrun_hosts, format_mpich_hostfile,
                             format_openmpi_hostfile, is_local_only, parse_hostfile,
                             parse_hosts_arg, total_slots)
from launch.plan import (BIND_TO, COMMAND_EXAMPLE, CONTROLLERS, PORT_BASE_FLAG, SRUN_MPI,
                         TIMELINE_FLAG)
from launch.redact import redact, redact_argv

# Kept on one line (raw formatting) so the command can be copied as printed.
EPILOG = f"example:\n  python -m launch run -H localhost:2 {COMMAND_EXAMPLE}"


@dataclass(frozen=True)
class Output:
    """Text for stdout, or for `path` when given."""
    text: str
    path: str | None = None


@dataclass(frozen=True)
class Launch:
    plan: spec.LaunchPlan
    dry_run: bool
    as_json: bool = False


class _Parser(usage.Parser):
    error_type = LaunchError


def _add(parser, *names, **kwargs):
    """One spelling per flag, with underscores: parse() turns dashes in a flag's name into
    underscores first (launch/argv.py), so --dry-run means --dry_run."""
    return parser.add_argument(*names, **kwargs)


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a whole number "
                                         "written with digits, e.g. 8")
    return int(text)


# launch.plan checks horovodrun's --fusion-threshold-mb against this bound too.
MAX_FUSION_MB = 65536


def _fusion_mib(text: str) -> float:
    """The trainer's --fusion_threshold_mb: MiB, fractions allowed, 0 = Horovod's default."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_FUSION_MB:     # also refuses nan
        raise argparse.ArgumentTypeError(
            f"received {text!r}; expected a non-negative number of MiB up to {MAX_FUSION_MB} "
            "(0 = Horovod's default, as the trainer's flag). Fix: e.g. --fusion_threshold_mb 64")
    return value


def _fusion_knob(args) -> tuple[int | None, tuple[tuple[str, str], ...]]:
    """(horovodrun's whole-MiB knob, env) for the threshold. horovodrun's flag takes whole
    MiB only, so a fraction goes as HOROVOD_FUSION_THRESHOLD in whole bytes under every
    launcher, rounded down as the trainer does; 0 leaves Horovod's default (horovodrun's
    --fusion-threshold-mb 0 would turn fusion off)."""
    mib = args.fusion_threshold_mb
    if not mib:
        return None, ()
    if mib == int(mib):
        return int(mib), ()
    if args.backend != "horovod":
        return None, ()                       # Horovod's knob: mwms ignores it, whole or not
    return None, (("HOROVOD_FUSION_THRESHOLD", str(int(mib * 1024 * 1024))),)


def _port_base_flag(group, default, help_text: str) -> None:
    _add(group, PORT_BASE_FLAG, dest="port_base", type=_whole, default=default,
         metavar="PORT", help=help_text + "; the trainer's flag of the same name")


def _hosts_flags(parser) -> None:
    group = parser.add_mutually_exclusive_group()
    _add(group, "--hostfile", help="hostfile: 'host slots=N', 'host:N' or 'host' per line")
    _add(group, "-H", "--hosts", help="host list, e.g. node01:8,node02:8")


def _run_flags(parser):
    """run's and print's flags, in headed groups; returns the output group."""
    job = parser.add_argument_group("backend and launcher")
    _add(job, "--backend", choices=contract.LAUNCHED_BACKENDS, default="horovod",
         help="the trainer's --backend the ranks will use (default: horovod)")
    _add(job, "--launcher", choices=spec.LAUNCHERS,
         help="default: horovodrun for horovod; local (localhost) or mpirun for mwms")
    ranks = parser.add_argument_group("hosts and ranks")
    _hosts_flags(ranks)
    _add(ranks, "-np", "--np", type=_whole, help="ranks (default: all slots)")
    _add(ranks, "--oversubscribe", action="store_true", help="more ranks than slots")
    hvd = parser.add_argument_group("horovod")
    _add(hvd, "--controller", choices=CONTROLLERS, help="horovodrun: gloo (default) or mpi")
    _add(hvd, "--fusion_threshold_mb", type=_fusion_mib, metavar="MIB",
         help="HOROVOD_FUSION_THRESHOLD in MiB, e.g. 64 or 1.5; 0 = Horovod's default "
              "(the trainer's flag of the same name)")
    _add(hvd, "--cycle_time_ms", type=float,
         help="HOROVOD_CYCLE_TIME (the trainer's flag of the same name)")
    _add(hvd, TIMELINE_FLAG, dest="timeline", metavar="PATH",
         help="write Horovod's timeline to PATH (the trainer's --horovod_timeline picks "
              "run_dir/timeline.json instead)")
    _add(hvd, "--network_interface", action="append", default=[],
         help="horovodrun --network-interfaces (repeat for several)")
    _port_base_flag(parser.add_argument_group("mwms"), contract.DEFAULT_MWMS_PORT_BASE,
                    "worker on a host listens on this + local rank")
    _env_flags(parser.add_argument_group("environment and threads"))
    _mpi_flags(parser.add_argument_group("mpirun and srun"))
    output = parser.add_argument_group("output")
    _add(output, "--json", action="store_true", help="print the plan as JSON")
    return output


def _env_flags(group) -> None:
    _add(group, "--env", action="append", default=[], metavar="NAME=VALUE")
    _add(group, "-x", "--forward", action="append", default=[], metavar="NAME",
         help="also forward NAME (HOROVOD_*, NCCL_*, OMP_* always are, and the TF_ and "
              "PYTHON names TensorFlow and Python read: launch/envvars.py)")
    _add(group, "--cores_per_host", type=_whole,
         help="set threads per rank to cores/ranks (default on localhost: this machine's)")
    _add(group, "--no_share_cores", action="store_true", help="do not set thread defaults")


def _mpi_flags(group) -> None:
    _add(group, "--bind_to", choices=BIND_TO, default="none", help="mpirun --bind-to")
    _add(group, "--map_by", default="slot", help="mpirun --map-by")
    _add(group, "--mca", action="append", default=[], metavar="NAME=VALUE",
         help="mpirun -mca NAME VALUE")
    _add(group, "--launch_agent", help="mpirun/mpich: program used instead of ssh")
    _add(group, "--srun_mpi", choices=SRUN_MPI, default="pmix", help="srun --mpi")
    _add(group, "--gpus_per_task", type=_whole, help="srun --gpus-per-task")


def _slurm_flags(parser) -> None:
    job = parser.add_argument_group("job")
    _add(job, "--backend", choices=contract.LAUNCHED_BACKENDS, default="horovod",
         help="the trainer's --backend the ranks will use (default: horovod)")
    _add(job, "--nodes", type=_whole, required=True)
    _add(job, "--gpus_per_node", type=_whole, default=0, help="0 for CPU nodes")
    _add(job, "--tasks_per_node", type=_whole, help="default: one per GPU (1 on CPU)")
    _add(job, "--cpus_per_task", type=_whole)
    _add(job, "--gpus_per_task", type=_whole)
    _add(job, "--partition")
    _add(job, "--time", help="e.g. 04:00:00")
    _add(job, "--job_name", default="horovod_train")
    _add(job, "--account")
    _add(job, "--exclusive", action="store_true")
    ranks = parser.add_argument_group("srun and mwms")
    _add(ranks, "--srun_mpi", choices=SRUN_MPI, default="pmix", help="srun --mpi (horovod)")
    _port_base_flag(ranks, None, "worker k of a node listens on this + k (default: from "
                    "SLURM_JOB_ID, so jobs sharing a node differ)")
    nccl = parser.add_argument_group("NCCL (GPU nodes)")
    _add(nccl, "--nccl_debug", choices=sbatch.NCCL_DEBUG_LEVELS, default="WARN")
    _add(nccl, "--nccl_ib_hca", help="e.g. mlx5_0,mlx5_1")
    _add(nccl, "--nccl_socket_ifname", help="e.g. ib0")
    _add(parser.add_argument_group("environment"), "--env", action="append", default=[],
         metavar="NAME=VALUE")
    out = parser.add_argument_group("output")
    _add(out, "--output_pattern", default="%x-%j.out", help="sbatch --output")
    _add(out, "-o", "--output", help="write the script here instead of stdout")


def _sub(subs, name: str, help_text: str, **kwargs):
    return subs.add_parser(name, help=help_text, description=help_text.capitalize(),
                           **kwargs)


PROG = "python -m launch"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Plan and start horovod_train "
                     "jobs: horovodrun, mpirun, srun, sbatch scripts and TF_CONFIG.\n"
                     "The training command goes after '--'. Flags take dashes or "
                     "underscores alike (--dry-run = --dry_run).", epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = parser.add_subparsers(dest="subcommand", required=True, parser_class=_Parser)
    run = _sub(subs, "run", "start the job (--dry_run: only print it)", epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    _add(_run_flags(run), "--dry_run", action="store_true",
         help="print the command and env instead of starting them")
    _run_flags(_sub(subs, "print", "print the exact command and env (dry run)", epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter))
    tfc = _sub(subs, "tf-config", "print TF_CONFIG JSON for MWMS worker --index")
    _hosts_flags(tfc)
    _add(tfc, "--index", type=_whole)
    _add(tfc, "--all", action="store_true", help="one line per worker")
    _port_base_flag(tfc, contract.DEFAULT_MWMS_PORT_BASE,
                    "worker on a host listens on this + local rank")
    _slurm_flags(_sub(subs, "slurm", "render an sbatch script"))
    nodes = _sub(subs, "nodelist", "expand a Slurm node list, one name per line")
    nodes.add_argument("nodelist")
    _hosts_subcommand(_sub(subs, "hosts", "validate a host list and print it normalised"))
    dump = _sub(subs, "stacks", "print where every rank of a live job is (its stacks), "
                "without stopping it")
    _add(dump, "--run_dir", required=True, help="the --run_dir the training was given")
    _add(dump, "--wait", type=float, default=10.0, help="seconds to wait for the dumps")
    _add(dump, "--native", action="store_true", help="also py-spy's native frames")
    return parser


def _hosts_subcommand(hosts) -> None:
    _hosts_flags(hosts)
    _add(hosts, "--nodelist", help="a Slurm node list, e.g. node[01-04]")
    _add(hosts, "--slots", type=_whole, default=1, help="slots per node for --nodelist")
    _add(hosts, "--tasks_per_node", help="Slurm counts for --nodelist, e.g. '8(x4)'")
    _add(hosts, "--slurm_env", action="store_true",
         help="hosts of the current Slurm job (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE)")
    _add(hosts, "--format", choices=("openmpi", "horovod", "mpich"), default="openmpi")


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, None


def _read_hosts(args, required: bool) -> list[Host]:
    if getattr(args, "hostfile", None):
        return parse_hostfile(args.hostfile)
    if getattr(args, "hosts", None):
        return parse_hosts_arg(args.hosts)
    if required:
        raise launch_error("--hostfile/-H", None, "a hostfile or a host list",
                           "--hostfile hostfiles/localhost or -H localhost:2")
    return []


def _pairs(items, flag: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise launch_error(flag, item, "NAME=VALUE", f"{flag} NCCL_DEBUG=INFO")
        pairs.append((name, value))
    return tuple(pairs)


def _cores(args, hosts: list[Host]):
    if args.no_share_cores:
        return None
    if args.cores_per_host is not None:
        return args.cores_per_host
    # Only the local machine's core count is known; remote hosts need --cores_per_host.
    if hosts and is_local_only(hosts) and max(h.slots for h in hosts) > 1:
        return os.cpu_count() or 1
    if not hosts and (args.np or 0) > 1 and args.launcher != "srun":
        return os.cpu_count() or 1
    return None


def launch_spec(args, command) -> spec.LaunchSpec:
    hosts = _read_hosts(args, required=False)
    fusion_mb, fusion_env = _fusion_knob(args)
    knobs = spec.HorovodKnobs(fusion_mb, args.cycle_time_ms, args.timeline,
                              tuple(args.network_interface))
    return spec.LaunchSpec(
        backend=args.backend, command=tuple(command), launcher=args.launcher,
        hosts=tuple(hosts), hostfile=args.hostfile, np=args.np, controller=args.controller,
        port_base=args.port_base, env=fusion_env + _pairs(args.env, "--env"),
        forward=tuple(args.forward),
        cores_per_host=_cores(args, hosts), oversubscribe=args.oversubscribe,
        bind_to=args.bind_to, map_by=args.map_by, mca=_pairs(args.mca, "--mca"),
        launch_agent=args.launch_agent, srun_mpi=args.srun_mpi,
        gpus_per_task=args.gpus_per_task, as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        horovod=knobs, ephemeral_ports=ports.read_ephemeral_range())


def _slurm_job(args, command, facts: trainer_check.TrainerFacts) -> sbatch.SlurmJob:
    return sbatch.SlurmJob(checked=facts.checked, stop_grace_s=facts.stop_grace_s,
        checkpoint_bytes=facts.checkpoint_bytes,
        backend=args.backend, command=tuple(command), nodes=args.nodes,
        gpus_per_node=args.gpus_per_node, tasks_per_node=args.tasks_per_node,
        cpus_per_task=args.cpus_per_task, partition=args.partition, time=args.time,
        job_name=args.job_name, account=args.account, output=args.output_pattern,
        exclusive=args.exclusive, srun_mpi=args.srun_mpi, gpus_per_task=args.gpus_per_task,
        port_base=args.port_base, nccl_debug=args.nccl_debug, nccl_ib_hca=args.nccl_ib_hca,
        nccl_socket_ifname=args.nccl_socket_ifname, env=_pairs(args.env, "--env"))


def _tf_config_text(args) -> str:
    hosts = _read_hosts(args, required=True)
    tfconfig.check_port_base(args.port_base, hosts, PORT_BASE_FLAG)
    configs = tfconfig.all_tf_configs(hosts, args.port_base)
    if args.all:
        return "\n".join(tfconfig.to_json(c) for c in configs) + "\n"
    if args.index is None:
        raise launch_error("--index", None, f"a worker index from 0 to {len(configs) - 1} "
                           "(or --all)", "--index 0")
    return tfconfig.to_json(tfconfig.tf_config_for_worker(hosts, args.index,
                                                          args.port_base)) + "\n"


def _hosts_text(args, environ) -> str:
    if args.slurm_env:
        hosts = slurm_nodes.hosts_from_slurm_env(environ)
    elif args.nodelist and args.tasks_per_node:
        hosts = slurm_nodes.hosts_from_slurm(args.nodelist, args.tasks_per_node)
    elif args.nodelist:
        hosts = [Host(name, args.slots) for name in slurm_nodes.expand_nodelist(
            args.nodelist, "--nodelist")]
    else:
        hosts = _read_hosts(args, required=True)
    if args.format == "horovod":
        return format_horovodrun_hosts(hosts) + "\n"
    if args.format == "mpich":
        return format_mpich_hostfile(hosts)
    count = spec.count
    return (f"# {count(len(hosts), 'host')}, {count(total_slots(hosts), 'slot')}\n"
            + format_openmpi_hostfile(hosts))


def parse(argv: list[str], environ, prog: str = PROG,
          check=None) -> Output | Launch | launch_stacks.StacksRequest:
    """Turns command-line words into an Output, a Launch or a request for stacks; raises
    LaunchError. `check(command) -> TrainerFacts` validates slurm's training command
    (launch/__main__.py passes the one that runs `horovod_train check`); None: unchecked."""
    options, command = _split_command(normalize_flag_names(list(argv)))
    args = build_parser(prog).parse_args(options)
    needs_command = args.subcommand in ("run", "print", "slurm")
    if needs_command and not command:
        raise launch_error(f"{prog} {args.subcommand}", None,
                           "the training command after '--'", COMMAND_EXAMPLE)
    if not needs_command and command is not None:
        raise launch_error(f"{prog} {args.subcommand}", command,
                           "no command ('--' is for run, print and slurm)",
                           "python -m launch tf-config --hostfile F --index 0")
    if args.subcommand in ("run", "print"):
        plan = spec.build_plan(launch_spec(args, command), environ)
        dry = args.subcommand == "print" or args.dry_run
        return Launch(plan, dry_run=dry, as_json=args.json)
    if args.subcommand == "slurm":
        facts = check(command) if check is not None else trainer_check.TrainerFacts()
        return Output(sbatch.render_sbatch(_slurm_job(args, command, facts)), args.output)
    if args.subcommand == "tf-config":
        return Output(_tf_config_text(args))
    if args.subcommand == "stacks":
        return launch_stacks.StacksRequest(args.run_dir, args.wait, args.native)
    if args.subcommand == "nodelist":
        return Output("\n".join(slurm_nodes.expand_nodelist(args.nodelist, "nodelist")) + "\n")
    return Output(_hosts_text(args, environ))


def format_plan(plan: spec.LaunchPlan, as_json: bool = False) -> str:
    """The dry-run text: exports of the env additions, then each exact command line, a
    URL's credentials masked (launch/redact.py: this text is shown, and logs keep it);
    --json, the plan for programs, keeps them."""
    if as_json:
        return json.dumps({"launcher": plan.launcher, "ranks": plan.ranks,
                           "notes": list(plan.notes),
                           "processes": [{"argv": list(p.argv), "env": p.env_dict()}
                                         for p in plan.processes]}, indent=2) + "\n"
    lines = [f"# launcher: {plan.launcher}; {_starts(plan)}"]
    lines += [f"# note: {note}" for note in plan.notes]
    shared = dict(set.intersection(*(set(p.env) for p in plan.processes)))
    lines.append("# environment additions:" + ("" if shared else " none"))
    lines += [f"export {k}={shlex.quote(redact(v))}" for k, v in sorted(shared.items())]
    for process in plan.processes:
        own = [redact(f"{k}={v}") for k, v in process.env if k not in shared]
        lines.append(shlex.join((["env"] + own if own else []) + redact_argv(process.argv)))
    return "\n".join(lines) + "\n"


def _starts(plan: spec.LaunchPlan) -> str:
    """What the processes start: one launcher process starts every rank (horovodrun,
    mpirun, srun); the local mwms launcher starts each rank itself."""
    processes, count = len(plan.processes), spec.count
    if processes > 1 or plan.ranks == 1 and plan.launcher == "local":
        return f"{count(processes, 'process')}, one rank" + (" each" if processes > 1 else "")
    ranks = ("one rank per task of the Slurm allocation" if plan.ranks is None
             else count(plan.ranks, "rank"))
    return f"{count(processes, 'launcher process')} starting {ranks}"
