"""The launch docs show real tool output: every `$ python -m launch ...` block is re-run.

Blocks live in docs/launch.md (and in README.md once merged there). The commands run
with a minimal environment (PATH, PYTHONPATH), the one the docs were generated with.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launch.hostfile import Host, parse_hostfile_text

REPO = Path(__file__).resolve().parents[2]
DOCS = [path for path in (REPO / "docs/launch.md", REPO / "README.md") if path.exists()]
BLOCK = re.compile(r"```console\n\$ (python -m launch [^\n]*)\n(.*?)```", re.S)


def run_launch(args, cwd=REPO):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=60)


def examples():
    found = []
    for path in DOCS:
        for match in BLOCK.finditer(path.read_text()):
            found.append(pytest.param(match.group(1), match.group(2),
                                      id=f"{path.name}:{match.group(1)[17:60]}"))
    return found


def test_docs_have_examples():
    assert (REPO / "docs/launch.md").exists()
    assert len(examples()) >= 8


@pytest.mark.parametrize("command, expected", examples())
def test_doc_example_matches_the_tool(command, expected):
    result = run_launch(shlex.split(command)[3:])
    assert result.returncode == 0, result.stderr
    actual = result.stdout
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        actual = as_normal_user(actual)
    assert actual == expected


def as_normal_user(text: str) -> str:
    """The docs show a normal user's plan; root adds OpenMPI's allow-root flag and env."""
    lines = [line for line in text.replace(" --allow-run-as-root", "").splitlines()
             if not line.startswith("export OMPI_ALLOW_RUN_AS_ROOT")]
    for index, line in enumerate(lines[:-1]):
        if line == "# environment additions:" and not lines[index + 1].startswith("export "):
            lines[index] += " none"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("euid", [0, 1000])
def test_readme_mpirun_block_as_root_and_as_a_user(monkeypatch, euid):
    """The README's mpirun block is a normal user's plan, word for word; as root the only
    differences are the ones the README names (issue 45)."""
    from launch import cli
    command, expected = next(p.values for p in examples() if "--launcher mpirun" in p.values[0]
                             and "README" in p.id)
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    action = cli.parse(shlex.split(command)[3:], {"PATH": "/usr/bin:/bin",
                                                  "PYTHONPATH": str(REPO)})
    actual = cli.format_plan(action.plan)
    if euid:
        assert actual == expected
    else:
        assert actual != expected and as_normal_user(actual) == expected
        assert actual.replace(" --allow-run-as-root", "") == expected


def test_doc_error_example_is_the_real_message(tmp_path):
    (tmp_path / "hosts").write_text("n1\nn2\na;rm -rf / slots=2\n")
    result = run_launch(["hosts", "--hostfile", "hosts"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() in (REPO / "docs/launch.md").read_text()


def test_doc_hostfile_example_parses():
    text = (REPO / "docs/launch.md").read_text()
    block = re.search(r"```\n(node01 slots=8 .*?)```", text, re.S).group(1)
    assert parse_hostfile_text(block, "docs") == [
        Host("node01", 8), Host("node02", 8), Host("node03", 1), Host("node04", 8, 16),
        Host("10.0.0.5", 4), Host("fe80::1", 4)]


# `python -m horovod_train` and what follows it on the line, up to a backtick or quote.
TRAINING_COMMAND = re.compile(r"python3? -m horovod_train(?![\w.])(?! plan\b)([^`'\"\n]*)")  # not the planner
LAUNCH_SOURCES = sorted((REPO / "launch").glob("**/*.py")) + sorted(
    (REPO / "launch" / "slurm").glob("*.tmpl"))


def real_training_flags() -> set[str]:
    """The flags `python -m horovod_train` defines (absl's own included), read in a
    child so this process's absl FLAGS stay untouched."""
    code = ("import json; from absl import flags; from horovod_train import flags as f; "
            "f.define_flags(); print(json.dumps(sorted(flags.FLAGS)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=60, env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def shown_training_flags() -> dict[str, str]:
    """Every --flag shown after `python -m horovod_train`, mapped to where it is shown."""
    texts = {str(path.relative_to(REPO)): path.read_text() for path in LAUNCH_SOURCES + DOCS}
    for args in (["--help"], ["run", "--help"], ["print", "--help"], ["slurm", "--help"]):
        texts["python -m launch " + " ".join(args)] = run_launch(args).stdout
    shown = {}
    for where, text in texts.items():
        for match in TRAINING_COMMAND.finditer(text):
            for flag in re.findall(r"(?:^|\s)--([A-Za-z][\w-]*)", match.group(1)):
                shown.setdefault(flag, where)
    return shown


def test_every_training_flag_in_launch_examples_and_docs_is_real():
    """Issue 17 item 16: the examples showed `--steps 100`, a flag that never existed."""
    shown = shown_training_flags()
    assert "max_steps" in shown  # the examples do show training flags
    real = real_training_flags()
    real |= {"no" + flag for flag in real}  # absl's --noflag spelling of booleans
    unknown = {flag: where for flag, where in shown.items() if flag not in real}
    assert not unknown, f"not flags of python -m horovod_train: {unknown}"
