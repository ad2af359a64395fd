"""tests/worker_groups.py: which slow tests share a pytest-xdist worker (a file is one
group; files sharing one of our session fixtures are one group together)."""
import os
import shutil
import subprocess
import sys
import types

from helpers import ROOT
from worker_groups import groups


class _Item:
    """A stand-in for a pytest item (hashable by identity, as pytest's are): fixtures maps
    a name to (scope, baseid)."""

    def __init__(self, nodeid, fixtures):
        self.nodeid, self.fixturenames = nodeid, list(fixtures)
        defs = {name: [types.SimpleNamespace(scope=scope, baseid=baseid)]
                for name, (scope, baseid) in fixtures.items()}
        self._fixtureinfo = types.SimpleNamespace(name2fixturedefs=defs)


OURS = ("session", "tests/multiprocess")
PLUGIN = ("session", "")  # tmp_path_factory and the like: every test shares them


def test_a_file_is_one_group_and_a_shared_session_fixture_joins_files():
    a1 = _Item("tests/multiprocess/test_a.py::one", {"gloo_session": OURS})
    a2 = _Item("tests/multiprocess/test_a.py::two", {"tmp_path_factory": PLUGIN})
    b = _Item("tests/multiprocess/test_b.py::one", {"gloo_session": OURS})
    c = _Item("tests/multiprocess/test_c.py::one", {"tmp_path_factory": PLUGIN,
                                                    "one_node": ("module", "tests/multiprocess")})
    d = _Item("tests/multiprocess/test_d.py::one", {"mpi_xla": OURS})
    e = _Item("tests/multiprocess/test_e.py::one", {"mpi_xla": OURS, "gloo_session": OURS})
    found = groups([a1, a2, b, c, d, e])
    assert found[a1] == found[a2] == found[b]  # a file, and the file sharing its scenario
    assert found[c] not in (found[a1], found[d])  # a plugin's or a module fixture joins none
    assert found[d] == found[e] == found[a1]  # e shares with both: one group of four files
    assert found[c] == "tests/multiprocess/test_c.py"  # a group is named by one of its files
    assert found[a1] in {"tests/multiprocess/test_%s.py" % x for x in "abde"}


FILE_WITH_A_SCENARIO = '''
import os
import pytest

@pytest.fixture(scope="module")
def scenario():
    return "launched once"

@pytest.mark.parametrize("case", range(6))
def test_case(scenario, case):
    out = os.environ["HT_WORKER_LOG"]
    with open(out, "a") as f:
        f.write("%s %s\\n" % (__name__, os.environ["PYTEST_XDIST_WORKER"]))
'''


def test_under_loadgroup_each_files_tests_run_in_one_worker(tmp_path):
    """The real tests/conftest.py over two slow-tier files of 6 tests each, under
    `-n 2 --dist loadgroup` as `make test` runs: each file's tests all run in one worker.
    pytest-xdist's worker names a test's group from its xdist_group mark in a hook of its
    own; ours must mark the tests before that hook runs, or every test is its own group and
    a file's module scenario launches in both workers (seen: test_gpu_build's venv built
    by both at once, and both builds failed)."""
    suite = tmp_path / "tests"
    (suite / "multiprocess").mkdir(parents=True)
    for name in ("conftest.py", "worker_groups.py", "process_count.py", "helpers.py"):
        shutil.copy(os.path.join(ROOT, "tests", name), suite / name)
    for name in ("test_a", "test_b"):
        (suite / "multiprocess" / f"{name}.py").write_text(FILE_WITH_A_SCENARIO)
    log = tmp_path / "workers.txt"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "-q", str(suite)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HT_WORKER_LOG=str(log)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = {}
    for line in log.read_text().splitlines():
        module, worker = line.split()
        seen.setdefault(module, set()).add(worker)
    assert sorted(seen) == ["test_a", "test_b"], seen
    assert all(len(workers) == 1 for workers in seen.values()), seen
