"""Nothing in the repository points outside it (docs/design.md): no tracked file names a
design file in a folder beside the repository or a path of the machine it was written
on. A reader of a clone has neither."""
import os
import re
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Built from parts so that this file does not match itself (nor a grep for them).
SHARED = "shared"
OUTSIDE = ("../" + SHARED, SHARED + "/DESIGN.md", "/" + "work/")


def tracked_files() -> list:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return [REPO / name for name in out.decode().split("\0") if name]


def outside_paths(text: str) -> list:
    return [needle for needle in OUTSIDE if needle in text]


def test_the_needles_catch_what_they_are_for():
    assert outside_paths("see ../" + SHARED + "/DESIGN.md") and outside_paths("/" + "work/main/.venv")
    assert not outside_paths("see docs/design.md and runs/bench/comm.json")


def test_no_tracked_file_points_outside_the_repository():
    found = {}
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary (images)
        hits = outside_paths(data.decode("utf-8", errors="replace"))
        if hits:
            found[str(path.relative_to(REPO))] = hits
    assert not found, (f"paths outside the repository: {found}; expected repository-relative "
                       "paths (the design: docs/design.md). Fix: point at the copy inside")


# A user's home on any machine; written in parts so this file does not match itself.
HOME_PATH = re.compile(r"(?<![\w.~$])/(?:" + "home|Us" + r"ers)/[\w.-]+/|(?<![\w.~$])/r" + "oot/")


def machine_paths() -> set:
    """Absolute paths of the machine the docs are checked on: the checkout, the venv, the
    interpreter's site-packages, the home directory, pytest's temporary folders."""
    found = {str(REPO), os.path.realpath(REPO), *site.getsitepackages(),
             os.path.join(tempfile.gettempdir(), "pytest-of-")}
    if sys.prefix != sys.base_prefix:  # a venv: its path is this machine's
        found.add(sys.prefix)
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        found.add(home.rstrip("/") + "/")
    return found


def doc_files() -> list:
    return [path for path in tracked_files() if path.suffix in (".md", ".rst", ".txt")
            and path.is_file()]


def machine_paths_in(text: str, needles) -> list:
    return sorted({n for n in needles if n in text} | set(HOME_PATH.findall(text)))


def test_the_machine_path_needles_catch_what_they_are_for():
    needles = machine_paths()
    assert machine_paths_in(f"see {REPO}/docs/x.md", needles)
    assert machine_paths_in("python at /" + "home/alice/venv/bin/python", set())
    assert machine_paths_in("cache in /r" + "oot/.cache/x", set())
    assert not machine_paths_in("~/.cache/horovod_train/ and /usr/bin/cmake, /dev/null/ck", needles)


def test_no_doc_names_a_path_of_the_machine_it_was_written_on():
    """Issue 45: docs rendered on one machine carried its absolute paths."""
    needles = machine_paths()
    found = {str(p.relative_to(REPO)): hits for p in doc_files()
             if (hits := machine_paths_in(p.read_text(errors="replace"), needles))}
    assert not found, (f"absolute paths of a build machine in docs: {found}; expected paths "
                       "relative to the checkout, ~ or $HOME. Fix: render them with "
                       "placeholders (scripts/hostile_inputs.py's placeholders does)")
