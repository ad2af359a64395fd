"""tests/worker_groups.py: which slow tests share a pytest-xdist worker (a file is one
group; files sharing one of our session fixtures are one group together)."""
import types

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
