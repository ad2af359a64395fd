"""`horovod_train SUBCOMMAND ...`: the one front door to every tool of the project. TF-free.

The console script `horovod_train` and `python -m horovod_train` both land here. The
first word picks the tool; flags first (`horovod_train --model=digits_mlp`) means `train`, as
`python -m horovod_train [flags]` always has. Each tool still runs on its own
(`python -m horovod_train.data`, `python -m launch`, ...); here it is told the name it was
called by, so its one-line errors (launch/usage.py) and --help say `horovod_train data`.
"""
import importlib
import sys
from dataclasses import dataclass

from horovod_train import console
from launch import usage

PROG = "horovod_train"
# What `python -m horovod_train --help` used to answer with alone: the overview comes
# first, then the trainer's flags.
HELP_WORDS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
VERSION_WORDS = ("--version", "-V")


@dataclass(frozen=True)
class Subcommand:
    name: str
    entry: str      # "module:function", imported only when chosen (no TF at start-up)
    summary: str


SUBCOMMANDS = (
    Subcommand("train", "horovod_train.__main__:train",
               "train a model on every rank (horovodrun, mpirun, srun or one process)"),
    Subcommand("check", "horovod_train.__main__:check",
               "validate training flags without training (launch slurm runs it first)"),
    Subcommand("plan", "horovod_train.plan.cli:main",
               "predict memory, step time, scaling efficiency and cost before renting GPUs"),
    Subcommand("data", "horovod_train.data.__main__:main",
               "convert data to TFRecord or LMDB shards, and verify every record"),
    Subcommand("report", "horovod_train.report:main",
               "a finished run's table and its plots (throughput.png, breakdown.png, ...)"),
    Subcommand("launch", "launch.__main__:main",
               "start jobs (horovodrun, mpirun, srun, local), render sbatch scripts, TF_CONFIG"),
)
BY_NAME = {sub.name: sub for sub in SUBCOMMANDS}


def overview() -> str:
    width = max(len(sub.name) for sub in SUBCOMMANDS)
    lines = [f"usage: {PROG} SUBCOMMAND [flags]   (python -m {PROG} SUBCOMMAND alike)", "",
             "subcommands:"]
    lines += [f"  {sub.name.ljust(width)}  {sub.summary}" for sub in SUBCOMMANDS]
    lines += ["", f"{PROG} SUBCOMMAND --help lists its flags; {PROG} --version prints the "
              "version.", f"Flags first ({PROG} --model=digits_mlp ...) means train; its flags "
              "follow.", ""]
    return "\n".join(lines)


def version() -> str:
    from horovod_train import __version__
    return f"{PROG} {__version__}"


def _unknown(word: str) -> str:
    names = [sub.name for sub in SUBCOMMANDS]
    return usage.error_line(PROG, (
        f"subcommand: received {word!r}; expected one of: {', '.join(names)} (or flags, "
        f"which train). Fix: {usage.did_you_mean(word, names)}see `{PROG} --help`"))


def run(argv: list[str]) -> int:
    """The exit code of the tool `argv` asks for."""
    console.redact_logs()  # before any tool logs a path (launch/redact.py)
    first = argv[0] if argv else "--"
    if first in VERSION_WORDS:
        print(version())
        return 0
    if first in HELP_WORDS:
        from horovod_train import flags as ht_flags
        sys.stdout.write(overview() + "\ntrain flags:\n" + ht_flags.help_text())
        return 0
    if first.startswith("-") or not argv:
        name, rest = "train", argv
    elif first in BY_NAME:
        name, rest = first, argv[1:]
    else:
        console.last_line(_unknown(first))
        return 2
    module, _, function = BY_NAME[name].entry.partition(":")
    tool = getattr(importlib.import_module(module), function)
    return tool(rest, prog=f"{PROG} {name}" if name != "train" else PROG) or 0


def standalone(tool) -> None:
    """A tool's own `python -m` entry (horovod_train.data, .report, ...): credentials
    masked in its log lines as through run(), then its exit code. `tool()` reads sys.argv."""
    console.redact_logs()
    sys.exit(tool() or 0)


def main() -> None:
    """The console script `horovod_train` (setup.cfg) and `python -m horovod_train`."""
    try:
        sys.exit(run(sys.argv[1:]))
    except BrokenPipeError:  # `horovod_train --help | head`: the reader has what it wanted
        sys.exit(0)
