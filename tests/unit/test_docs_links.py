"""The README and docs/ point at things that exist: every relative link resolves (file and
heading), and every `--flag` they name is a flag of one of our tools or of the named
outside tool that the text is about (horovodrun, mpirun, srun, pip, pytest, ...)."""
import re
from pathlib import Path

import pytest

from horovod_train import flags as ht_flags
from horovod_train.plan.cli import ALIASES as PLAN_ALIASES
from horovod_train.plan.cli import RENAMED as PLAN_RENAMED

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])")
README_MAX_LINES = 250
# The planner's retired names (refused with the new one): no flag, although the source
# spells them. A page may show one only in a block that shows its refusal.
RETIRED = {old[2:] for old in PLAN_RENAMED}
# Its old names still accepted: the pages speak the one vocabulary, the trainer's names.
OLD_ALIASES = {old[2:] for old in PLAN_ALIASES}

# Flags of other programs that the pages show in commands. Each is that program's, not
# ours (a few names are both, e.g. --nodes: the page shows the outside tool's).
OUTSIDE_FLAGS = {
    # horovodrun
    "gloo", "mpi", "min-np", "max-np", "host-discovery-script", "check-build", "verbose",
    "blacklist-cooldown-range", "network-interface", "start-timeout", "np", "hostfile",
    "disable-cache", "timeline-filename", "tcp", "gloo-timeout-seconds", "output-filename",
    # mpirun / Open MPI
    "bind-to", "map-by", "allow-run-as-root", "tag-output", "mca", "oversubscribe", "host",
    "report-bindings", "use-hwthread-cpus",
    # srun / sbatch / salloc / scontrol
    "ntasks-per-node", "cpus-per-task", "gpus-per-node", "gpus-per-task", "distribution",
    "kill-on-bad-exit", "job-name", "nodes", "time", "partition", "output", "wait", "wrap",
    "ntasks", "nodelist", "export", "overlap", "exclusive", "preserve-env", "requeue",
    "no-requeue", "open-mode", "signal",
    # Open MPI's configure
    "with-pmi", "with-pmix",
    # pip / python -m build / venv / apt
    "no-binary", "no-build-isolation", "no-deps", "no-cache-dir", "upgrade", "sdist", "wheel",
    "index-url", "extra-index-url", "system-site-packages", "editable", "break-system-packages",
    # pytest
    "strict-markers", "durations", "timeout", "lf", "collect-only", "dist",
    # TensorBoard, ssh, git, ip
    "logdir", "port", "bind_all", "depth", "netns",
    # not a flag of anything: observability.md says why ours is not called that
    "timeline",
}


def our_flags() -> set[str]:
    """The trainer's flags (one per config field, absl's `--no` form for booleans), the
    parsers of `launch` and `plan` (with their subcommands), and every `"--name"` string the
    other tools' source spells (data, report, bench/, scripts/, examples/; also the flags
    our command builders emit for horovodrun, mpirun and srun)."""
    names = {"help", "helpshort", "helpfull", "helpxml", "flagfile"}
    for _owner, field in ht_flags.option_fields():
        names.update((field.name, "no" + field.name))
    for parser in _argparse_parsers():
        for action in parser._actions:  # noqa: SLF001 - argparse has no public list
            names.update(opt[2:] for opt in action.option_strings if opt.startswith("--"))
    for folder in ("horovod_train", "launch", "bench", "scripts", "examples"):
        for source in (REPO / folder).rglob("*.py"):
            names.update(re.findall(r"[\"']--([a-z][a-z0-9_-]*)[=\"']", source.read_text()))
    return {name.replace("-", "_") for name in names} - RETIRED - OLD_ALIASES


def _argparse_parsers():
    import argparse

    from horovod_train.plan.cli import build_parser as plan_parser
    from launch.cli import build_parser as launch_parser
    todo = [launch_parser(), plan_parser()]
    while todo:
        parser = todo.pop()
        yield parser
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                todo.extend(action.choices.values())


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _links():
    for page in PAGES:
        in_code = False
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if not re.match(r"[a-z]+:", target):
                    yield pytest.param(page, target, id=f"{page.name}->{target}")


@pytest.mark.parametrize("page, target", list(_links()))
def test_relative_link_resolves(page, target):
    file_part, _, anchor = target.partition("#")
    dest = (page.parent / file_part).resolve() if file_part else page
    assert dest.exists(), f"{page.name}: link to {target!r}, but {dest} does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), (
            f"{page.name}: link to {target!r}, but {dest.name} has no heading with that anchor; "
            f"it has {sorted(_anchors(dest))}")


def _named_flags(text: str):
    """The `--names` a page spells, but a retired name inside a fenced block that shows
    the planner refusing it (`error: --fusion_mb: ...`)."""
    for segment in text.split("```"):
        refused = {name for name in RETIRED if f"error: --{name}:" in segment}
        yield from (name for name in FLAG.findall(segment) if name not in refused)


def test_retired_names_are_not_flags():
    assert RETIRED and not RETIRED & our_flags()
    assert OLD_ALIASES and not OLD_ALIASES & our_flags()
    assert list(_named_flags("run plan --fusion_mb 64")) == ["fusion_mb"]
    shown = "```\n$ plan --fusion_mb 64\nerror: --fusion_mb: received\n```"
    assert list(_named_flags(shown)) == []


def test_every_named_flag_exists():
    ours = our_flags()
    unknown = {}
    for page in PAGES:
        for name in _named_flags(page.read_text()):
            if name.replace("-", "_") not in ours and name not in OUTSIDE_FLAGS:
                unknown.setdefault(name, page.name)
    assert not unknown, f"flags named in the docs that no tool has: {unknown}"


def test_readme_is_short_and_leads_with_the_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:20])
    assert "make train" in head and "make test" in head
