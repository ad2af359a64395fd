"""Nothing in the repository points outside it (docs/design.md): no tracked file names a
design file in a folder beside the repository or a path of the machine it was written
on. A reader of a clone has neither."""
import subprocess
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
