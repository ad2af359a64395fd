"""A training command checked by the trainer's own flag definitions, before a script is
written. Stdlib only; pure (launch/__main__.py runs the check, the one place that spawns).

launch/ may not import horovod_train (nor TensorFlow), so it cannot parse the trainer's
flags itself; a flag table copied here would drift from the config dataclasses the flags
are generated from. Instead `horovod_train check FLAGS` runs in a subprocess: the same
parser and validation as a rank, without TensorFlow (about 0.1-0.5 s), and it answers
with the facts the script needs (stop grace, checkpoint size) as one JSON line.
"""
import json
import os
import sys
from dataclasses import dataclass

from launch import contract
from launch.errors import LaunchError, launch_error

TIMEOUT_S = 120
_MODULE = ("-m", "horovod_train")
_SCRIPTS = ("horovod_train", "horovod-train")


@dataclass(frozen=True)
class TrainerFacts:
    """What the script needs from the training command; `checked` False for a command
    that is not the trainer (a user's own script): the defaults then."""
    checked: bool = False
    stop_grace_s: float = contract.DEFAULT_STOP_GRACE_S
    checkpoint_bytes: int | None = None
    checkpoint_dir: str | None = None


def trainer_flags(command) -> list[str] | None:
    """The trainer's flags when `command` runs the trainer (`python -m horovod_train
    [train] ...`, `horovod_train [train] ...`); None for anything else."""
    words = list(command)
    if len(words) >= 3 and os.path.basename(words[0]).startswith("python") \
            and tuple(words[1:3]) == _MODULE:
        rest = words[3:]
    elif words and os.path.basename(words[0]) in _SCRIPTS:
        rest = words[1:]
    else:
        return None
    if rest and rest[0] == "train":
        return rest[1:]
    return rest if not rest or rest[0].startswith("-") else None  # plan, data...: not training


def check_argv(flags: list[str]) -> list[str]:
    """This interpreter and this checkout's horovod_train (the launcher's own tree)."""
    return [sys.executable, "-m", "horovod_train", "check", *flags]


def check_env(environ) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(filter(None, [root, environ.get("PYTHONPATH")]))
    return {**environ, "PYTHONPATH": path}


def read_answer(returncode: int, stdout: str, stderr: str) -> TrainerFacts:
    """The check's exit code and output as facts; LaunchError for a refused command (the
    trainer's own one line) or a check that could not run."""
    if returncode == 2:
        line = (stderr.strip().splitlines() or ["(no message)"])[-1]
        raise LaunchError("the training command after '--': "
                          + line.removeprefix("horovod_train: error: "))
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
        return TrainerFacts(True, float(answer["stop_grace_s"]), answer["checkpoint_bytes"],
                            answer["checkpoint_dir"])
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (stderr.strip().splitlines() or [f"exit code {returncode}"])[-1]
        raise launch_error("the training command's check (horovod_train check)", tail,
                           "its JSON answer: horovod_train importable by this Python",
                           "run the launcher with the Python that has horovod_train and "
                           "absl installed") from None
