"""Which tests must run in the same pytest-xdist worker when the slow tiers run on two
(`make test`: `-n 2 --dist loadgroup`, docs/testing.md).

A module-scoped fixture (a file's scenario) runs once per worker that runs one of its
tests, and a session-scoped one (tests/multiprocess/conftest.py's shared launches) once
per worker that asks for it: split across workers, a launch would run twice. So a file is
one group, and files that share one of our session fixtures are one group together. The
groups come from the fixtures the tests ask for, so a new shared scenario needs no list.
"""


def _shared_fixtures(item) -> list[str]:
    """The session-scoped fixtures this test asks for that tests/ defines (pytest's and
    plugins' own session fixtures, tmp_path_factory for one, are shared by every test and
    hold no launch)."""
    shared = []
    for name in item.fixturenames:
        defs = item._fixtureinfo.name2fixturedefs.get(name)
        if defs and defs[-1].scope == "session" and defs[-1].baseid.startswith("tests"):
            shared.append(name)
    return shared


def groups(items) -> dict:
    """{test item: group name}: the name of one of the files in its group."""
    parent = {}

    def find(key):
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def join(a, b):
        parent[find(a)] = find(b)

    files = {item: item.nodeid.split("::")[0] for item in items}
    for item, path in files.items():
        find(path)
        for fixture in _shared_fixtures(item):
            join(f"fixture:{fixture}", path)  # the file names the group, not the fixture
    return {item: find(path) for item, path in files.items()}
