"""Renders ready-to-submit sbatch scripts from launch/slurm/*.sh.tmpl. Pure.

Every user value that lands in the script passes a narrow check and then
shlex.quote: #SBATCH values (which sbatch, not bash, parses) are restricted to a
character set that shlex.quote leaves unchanged, and every exported value and every
word of the training command is quoted. The templates' own shell code is fixed text.
"""
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from launch import contract, plan
from launch.envvars import check_env_name, check_env_value, cpu_sharing_env
from launch.errors import launch_error
from launch.hostfile import MAX_HOSTS, MAX_SLOTS
from launch.tfconfig import check_port_range

TEMPLATE_DIR = Path(__file__).resolve().parent / "slurm"
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")  # NCCL's own values of NCCL_DEBUG
_SBATCH_VALUE = re.compile(r"^[A-Za-z0-9_.:,/@%+=][A-Za-z0-9_.:,/@%+=-]{0,199}$")
_TIME = re.compile(r"^([0-9]{1,3}-)?[0-9]{1,5}(:[0-9]{1,2}){0,2}$")
_NCCL_VALUE = re.compile(r"^[A-Za-z0-9_.:,^=-]{1,200}$")
# How a script is relaunched, after its #SBATCH lines (docs/faults.md, "After a
# preemption"; tested in tests/multiprocess/test_slurm_local.py).
RELAUNCH = (
    "# Relaunch: the script ends with the training's exit code. A job whose ranks exit 75 (a",
    "# peer was lost) or 143 (stopped on SIGTERM by scancel, the time limit or a preemption,",
    "# after a checkpoint) resumes from the newest checkpoint when this file is submitted",
    "# again, on fewer nodes too: `sbatch --nodes=1 THIS_FILE` (srun takes its nodes and",
    "# tasks from the allocation; the accumulation keeps the global batch). Where Slurm",
    "# requeues a job (a node failure, a preemption in REQUEUE mode, scontrol requeue) it",
    "# comes back under its own id, resumes, and appends to the same output file.",
    "#SBATCH --requeue",
    "#SBATCH --open-mode=append",
)
# Runs in every task: TF_CONFIG from the worker list and this task's SLURM_PROCID, then
# the training command from "$@". Constant text: no user input is ever spliced in.
_MWMS_TASK = (f'export {contract.ENV_TF_CONFIG}="{{\\"cluster\\":{{\\"worker\\":'
              f'[${{{contract.ENV_TF_WORKERS}}}]}},'
              '\\"task\\":{\\"type\\":\\"worker\\",\\"index\\":${SLURM_PROCID}}}"; exec "$@"')


# The early signal (#SBATCH --signal=TERM@N, no "B:", so it reaches every rank of the job
# steps, not the batch shell): at the time limit Slurm sends SIGTERM and, KillWait later
# (30 s by default), SIGKILL, too soon for a checkpoint the trainer may take up to
# --stop_grace_s to write. N covers the longer of --stop_grace_s and the checkpoint's
# write at WRITE_BYTES_PER_S (a cautious shared filesystem), plus EXIT_MARGIN_S to exit.
WRITE_BYTES_PER_S = 100e6
EXIT_MARGIN_S = 15
MAX_SIGNAL_S = 65535  # Slurm's limit for sig_time


def signal_seconds(stop_grace_s: float, checkpoint_bytes: int | None) -> int:
    write_s = (checkpoint_bytes or 0) / WRITE_BYTES_PER_S
    return min(MAX_SIGNAL_S, math.ceil(max(stop_grace_s, write_s) + EXIT_MARGIN_S))


def time_seconds(text: str) -> int:
    """Slurm's --time (a _TIME match: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        parts = (parts + [0, 0])[:3]
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    minutes_first = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
    return sum(p * unit for p, unit in zip(parts, minutes_first))


def signal_notes(job) -> list[str]:
    """Why the script's --signal says N, and what to fix when the stop cannot fit."""
    n = signal_seconds(job.stop_grace_s, job.checkpoint_bytes)
    notes = [f"# Early signal: Slurm sends SIGTERM to every rank {n} s before --time ends, so they",
             "# stop at a step boundary and write a checkpoint before the limit, and this file",
             "# submitted again resumes there. N: the longer of --stop_grace_s "
             f"({job.stop_grace_s:g} s)"]
    if job.checkpoint_bytes is not None:
        write_s = job.checkpoint_bytes / WRITE_BYTES_PER_S
        notes.append(f"# and the checkpoint's write (about {job.checkpoint_bytes / 1e9:.2g} GB "
                     f"at {WRITE_BYTES_PER_S / 1e6:g} MB/s: {write_s:.0f} s)")
        if write_s > job.stop_grace_s:
            notes.append(f"# warning: --stop_grace_s {job.stop_grace_s:g} is shorter than that "
                         "write: raise it, or the stop may end without a checkpoint.")
    notes.append(f"# + {EXIT_MARGIN_S} s to exit. (Slurm may send it up to 60 s earlier.)")
    if not job.checked:
        notes.append("# The command is not horovod_train's trainer: not checked, and the "
                     "trainer's default --stop_grace_s assumed.")
    return notes


@dataclass(frozen=True)
class SlurmJob:
    backend: str
    command: tuple[str, ...]
    nodes: int
    gpus_per_node: int = 0                # 0: CPU-only job
    tasks_per_node: int | None = None     # None: one task per GPU (or 1 on CPU nodes)
    cpus_per_task: int | None = None
    partition: str | None = None
    time: str | None = None
    job_name: str = "horovod_train"
    account: str | None = None
    output: str = "%x-%j.out"
    exclusive: bool = False
    srun_mpi: str = "pmix"                # horovod only; mwms needs no PMI
    gpus_per_task: int | None = None
    port_base: int | None = None          # mwms; None: from SLURM_JOB_ID (contract)
    nccl_debug: str = "WARN"
    nccl_ib_hca: str | None = None
    nccl_socket_ifname: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    # From the training command's check (launch/trainer_check.py): checked is False for a
    # command that is not the trainer.
    checked: bool = False
    stop_grace_s: float = contract.DEFAULT_STOP_GRACE_S
    checkpoint_bytes: int | None = None


def _sbatch_value(value, flag: str, example: str) -> str:
    if not isinstance(value, str) or not _SBATCH_VALUE.match(value):
        raise launch_error(flag, value, "letters, digits and _.:,/@%+=- only (no spaces; "
                           "sbatch reads #SBATCH lines itself)", example)
    # This character set is one shlex.quote leaves as is, so the value is also
    # shell-safe should anyone copy it onto a command line.
    return shlex.quote(value)


def tasks_per_node(job: SlurmJob) -> int:
    if job.tasks_per_node is not None:
        return plan.check_count(job.tasks_per_node, "--tasks_per_node", MAX_SLOTS)
    return job.gpus_per_node or 1


def _sbatch_lines(job: SlurmJob) -> list[str]:
    lines = [("job-name", _sbatch_value(job.job_name, "--job_name", "resnet50")),
             ("nodes", str(plan.check_count(job.nodes, "--nodes", MAX_HOSTS))),
             ("ntasks-per-node", str(tasks_per_node(job)))]
    if not isinstance(job.gpus_per_node, int) or not 0 <= job.gpus_per_node <= 64:
        raise launch_error("--gpus_per_node", job.gpus_per_node, "a whole number from 0 "
                           "(CPU-only) to 64", "--gpus_per_node 8")
    if job.gpus_per_node:
        lines.append(("gpus-per-node", str(job.gpus_per_node)))
    if job.cpus_per_task is not None:
        lines.append(("cpus-per-task", str(plan.check_count(job.cpus_per_task,
                                                            "--cpus_per_task", MAX_SLOTS))))
    if job.time is not None:
        if not isinstance(job.time, str) or not _TIME.match(job.time):
            raise launch_error("--time", job.time, "minutes, HH:MM:SS or D-HH:MM:SS",
                               "--time 04:00:00")
        early = signal_seconds(job.stop_grace_s, job.checkpoint_bytes)
        if time_seconds(job.time) <= early:
            raise launch_error("--time", job.time, f"more than the {early} s before its end at "
                               "which Slurm signals the ranks to checkpoint and stop (else "
                               "they are told to stop as they start)",
                               f"--time {early // 60 + 2} (minutes), or a lower --stop_grace_s")
        lines.append(("time", job.time))
    for key, value, example in (("partition", job.partition, "gpu"),
                                ("account", job.account, "proj123")):
        if value is not None:
            lines.append((key, _sbatch_value(value, f"--{key}", example)))
    lines.append(("output", _sbatch_value(job.output, "--output_pattern", "%x-%j.out")))
    lines.append(("signal", f"TERM@{signal_seconds(job.stop_grace_s, job.checkpoint_bytes)}"))
    rendered = [f"#SBATCH --{key}={value}" for key, value in lines]
    if job.exclusive:
        rendered.append("#SBATCH --exclusive")
    return rendered + list(RELAUNCH) + signal_notes(job)


def _nccl_lines(job: SlurmJob) -> list[str]:
    plan.check_choice(job.nccl_debug, NCCL_DEBUG_LEVELS, "--nccl_debug")
    if not job.gpus_per_node:
        return ["# CPU-only job: no NCCL settings needed."]
    settings = (
        ("NCCL_DEBUG", job.nccl_debug, "WARN", "WARN shows only problems; INFO to debug"),
        ("NCCL_IB_HCA", job.nccl_ib_hca, "mlx5_0,mlx5_1", "RDMA NICs to use (ibv_devices)"),
        ("NCCL_SOCKET_IFNAME", job.nccl_socket_ifname, "ib0",
         "interface for bootstrap/TCP ('^lo,docker' excludes)"),
    )
    lines = []
    for name, value, example, why in settings:
        if value is None:
            lines.append(f"# export {name}={example}  # {why}")
        else:
            if not isinstance(value, str) or not _NCCL_VALUE.match(value):
                raise launch_error(f"--{name.lower()}", value, "letters, digits and "
                                   "_.:,^=- only", f"--{name.lower()} {example}")
            lines.append(f"export {name}={shlex.quote(value)}  # {why}")
    lines += ["# export NCCL_IB_GID_INDEX=3  # RoCE v2 fabrics usually need this",
              "# export NCCL_NET_GDR_LEVEL=PHB  # GPUDirect RDMA up to the PCIe host bridge",
              "# export NCCL_IB_DISABLE=1  # no InfiniBand/RoCE: force TCP sockets"]
    return lines


def _env_lines(job: SlurmJob) -> list[str]:
    env: dict[str, str] = {}
    if job.cpus_per_task is not None:
        ranks = tasks_per_node(job)
        shared = cpu_sharing_env(job.cpus_per_task * ranks, ranks)
        # GPU ranks want low collective latency, so only the thread counts apply there.
        keep = shared if not job.gpus_per_node else {
            k: v for k, v in shared.items() if k in contract.ENV_THREAD_NAMES}
        env.update(keep)
    for name, value in job.env:
        env[check_env_name(name, "--env")] = check_env_value(value, f"--env {name}")
    if not env:
        return ["# (none)"]
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def _srun_text(job: SlurmJob) -> str:
    command = plan.check_command(list(job.command))
    if job.backend == "mwms":
        command = ["bash", "-c", _MWMS_TASK, "mwms-task"] + command
    mpi = job.srun_mpi if job.backend == "horovod" else "none"
    # No task count: srun takes the allocation's, so `sbatch --nodes=1 THIS_FILE` runs
    # on one node (a count given here would only be overridden, with a warning).
    argv = plan.srun_argv(command, mpi=mpi, cpus_per_task=job.cpus_per_task,
                          gpus_per_task=job.gpus_per_task, export=None)
    options = argv[:len(argv) - len(command)]
    return " \\\n  ".join([shlex.join(options)] + [shlex.join(command)])


def _port_base_text(job: SlurmJob) -> str:
    """The given base, or the job's own from $SLURM_JOB_ID (contract.slurm_port_base),
    so two jobs on one node do not share ports."""
    width = tasks_per_node(job)
    if job.port_base is None:
        return contract.slurm_port_base_shell(width)
    return str(check_port_range(job.port_base, width, plan.PORT_BASE_FLAG))


def render_sbatch(job: SlurmJob) -> str:
    """The sbatch script text for `job` (validated; raises LaunchError on bad input)."""
    plan.check_choice(job.backend, contract.LAUNCHED_BACKENDS, "--backend")
    values = {"@SBATCH@": "\n".join(_sbatch_lines(job)),
              "@NCCL@": "\n".join(_nccl_lines(job)),
              "@ENV@": "\n".join(_env_lines(job)),
              "@SRUN@": _srun_text(job),
              "@PORT_BASE@": _port_base_text(job),
              "@TASKS_PER_NODE@": str(tasks_per_node(job)),
              "@ENV_TF_WORKERS@": contract.ENV_TF_WORKERS,
              "@ENV_MWMS_PORT_BASE@": contract.ENV_MWMS_PORT_BASE}
    text = (TEMPLATE_DIR / f"{job.backend}.sbatch.sh.tmpl").read_text()
    for key, value in values.items():
        text = text.replace(key, value)
    return text
