"""pytest's hook file for tests/. It holds no helpers: those are in helpers.py, a plain
module; pytest puts this directory on sys.path because this file is here, which is what
lets every tier `from helpers import ...`.

It holds the one rule for tiers: a test's directory sets its markers (TIERS), so no file
carries a mark of its own and none can be forgotten. `make test-fast` runs -m "not slow";
`make test` runs everything (docs/testing.md)."""
import os
import pathlib
import shutil
import time

import pytest

import worker_groups
from helpers import OMPI_TMPDIR_VAR, ompi_session_base
from process_count import ProcessCounter

HERE = pathlib.Path(__file__).parent
# Directory under tests/ -> the markers of every test in it.
TIERS = {
    "unit": (),  # no TensorFlow, no processes
    "tf": ("tf",),  # TensorFlow in this process
    "multiprocess": ("slow",),  # real ranks: horovodrun, mpirun, MWMS workers, Slurm
    "e2e": ("slow", "e2e"),  # the command lines, run as a user runs them
}


def tier_markers(path: pathlib.Path) -> tuple:
    """The markers of a test file, from its directory under tests/. A file elsewhere is
    an error: it would silently belong to no tier."""
    try:
        directory = path.resolve().relative_to(HERE.resolve()).parts[0]
    except ValueError:
        directory = None
    if directory not in TIERS:
        raise pytest.UsageError(
            f"{path}: a test outside the tier directories; expected it under tests/ in one "
            f"of {', '.join(TIERS)}. Fix: move it there (tests/conftest.py TIERS)")
    return TIERS[directory]


# tryfirst: pytest-xdist's worker reads the xdist_group marks in a hook of its own,
# registered after this file and so called before it unless told otherwise; the marks must
# be there by then, or under loadgroup every test is its own group and a file's scenario
# launches in both workers (test_worker_groups.py). pytest's -m selection, later, reads
# the tier marks too.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in tier_markers(pathlib.Path(item.fspath)):
            item.add_marker(getattr(pytest.mark, name))
    # Under `-n 2 --dist loadgroup` (`make test`) a group of slow tests runs in one
    # worker, so no scenario launches twice (worker_groups.py); elsewhere the marks are inert.
    slow = [item for item in items if item.get_closest_marker("slow")]
    for item, group in worker_groups.groups(slow).items():
        item.add_marker(pytest.mark.xdist_group(group))


class TierClock:
    """Seconds and tests per tier (setup + call + teardown, so a scenario's shared launch
    counts where it ran), and the Python processes and ranks each tier started
    (process_count.py: what a multi-rank test pays for), printed at the end, so every
    `make test` shows where its time went. Under pytest -n (both of `make test`'s
    sessions) the seconds are the workers' summed time, about twice the wall time, and a
    process counts toward the tier of the test that started last in either worker.
    A plugin registered per session (pytest_configure), not module state."""

    def __init__(self):
        self.seconds, self.tests = {}, {}
        self.counter = ProcessCounter()
        self.started = time.monotonic()

    def pytest_sessionstart(self, session):
        self.started = time.monotonic()
        self.counter.start()

    def pytest_sessionfinish(self, session):
        self.counter.stop()

    def pytest_runtest_logstart(self, nodeid, location):
        self.counter.tier = tier_name(location[0])

    def pytest_runtest_logreport(self, report):
        tier = tier_name(report.fspath)
        self.seconds[tier] = self.seconds.get(tier, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.tests[tier] = self.tests.get(tier, 0) + 1

    def pytest_terminal_summary(self, terminalreporter):
        if self.seconds:
            terminalreporter.write_line(self.line())

    def line(self) -> str:
        parts = [f"{tier} {self.tests.get(tier, 0)} tests {self.seconds[tier]:.0f} s"
                 f"{self.counter.words(tier)}" for tier in TIERS if tier in self.seconds]
        return ("tiers | " + " | ".join(parts) + f" | all {sum(self.seconds.values()):.0f} s"
                f" in {time.monotonic() - self.started:.0f} s of wall time")


def tier_name(fspath) -> str:
    parts = pathlib.PurePath(str(fspath)).parts
    return parts[parts.index("tests") + 1] if "tests" in parts else "?"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # under pytest -n, the controller alone counts
        config.pluginmanager.register(TierClock(), "tier_clock")
    # Each pytest process (each -n worker) gives the Open MPI jobs it starts a session
    # directory of its own: in the shared /tmp/ompi.<host>.<uid>, one worker's job ending
    # removed what another's was creating, and orted failed to start (seen under -n 2 in
    # test_mpirun_daemons_start_on_every_try). Children inherit it (helpers.child_env
    # copies os.environ).
    config._ompi_tmpdir = ompi_session_base()
    os.environ[OMPI_TMPDIR_VAR] = config._ompi_tmpdir


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "_ompi_tmpdir", ""), ignore_errors=True)
