"""scripts/test_profile.py's arithmetic, on a made-up run: tests and seconds per file from
the JUnit XML, the processes each test started (by the pytest node id children inherit),
the seconds its training processes spent before their first step, and coverage per
package; and docs/testing.md's tables are the kept profiles' (python scripts/test_profile.py
doc writes them)."""
import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("test_profile", REPO / "scripts" / "test_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.multiprocess.test_a" name="test_one" time="10.5"/>
<testcase classname="tests.multiprocess.test_a" name="test_two[gloo]" time="4.5"/>
<testcase classname="tests.unit.test_b" name="test_three" time="0.25"><skipped message="x"/></testcase>
</testsuite></testsuites>"""


def _log(path: Path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_files_and_tests_add_up_with_their_processes(tmp_path):
    script = _script()
    (tmp_path / "junit.xml").write_text(JUNIT)
    one, two = "tests/multiprocess/test_a.py::test_one", "tests/multiprocess/test_a.py::test_two[gloo]"
    _log(tmp_path / "processes.jsonl", [
        {"kind": "start", "pid": 1, "test": "", "t": 0, "argv": ["pytest"]},  # not a test's
        {"kind": "start", "pid": 2, "test": one, "t": 1, "argv": ["horovodrun"]},
        {"kind": "start", "pid": 3, "test": one, "t": 2, "argv": ["python", "-m", "horovod_train"]},
        {"kind": "start", "pid": 4, "test": one, "t": 2, "argv": ["python", "-m", "horovod_train"]},
        {"kind": "end", "pid": 3, "test": one, "t": 9, "code": None, "first_step_s": 5.5},
        {"kind": "end", "pid": 4, "test": one, "t": 9, "code": None, "first_step_s": 6.0},
        {"kind": "end", "pid": 2, "test": one, "t": 10, "code": None, "first_step_s": None},
        {"kind": "start", "pid": 5, "test": two, "t": 12, "argv": ["python", "worker.py"]},
        # pid 5 never ended cleanly (killed): counted, no end record.
    ])
    coverage = {"horovod_train/a.py": {"statements": 10, "missing": 2, "percent": 80.0},
                "launch/b.py": {"statements": 4, "missing": 0, "percent": 100.0},
                "tests/x.py": {"statements": 5, "missing": 5, "percent": 0.0}}
    profile = script.summarize(str(tmp_path), wall=20.0, code=0, coverage=coverage)
    files = profile["files"]
    assert files["tests/multiprocess/test_a.py"] == {"tests": 2, "seconds": 15.0, "processes": 4,
                                                     "before_first_step_s": 11.5}
    assert files["tests/unit/test_b.py"]["processes"] == 0
    by_test = {t["test"]: t for t in profile["tests"]}
    assert by_test[one]["trainers"] == 2 and by_test[two]["processes"] == 1
    assert by_test["tests/unit/test_b.py::test_three"]["outcome"] == "skipped"
    assert profile["packages"] == {"horovod_train": 80.0, "launch": 100.0}
    table = script.files_table(profile)
    assert table.splitlines()[2].startswith("| tests/multiprocess/test_a.py | 2 | 15 | 4 | 12 |")


def test_a_module_that_lost_coverage_shows_its_change():
    script = _script()
    before = {"coverage": {"launch/b.py": {"statements": 4, "missing": 0, "percent": 100.0}},
              "packages": {"launch": 100.0}}
    after = {"coverage": {"launch/b.py": {"statements": 4, "missing": 1, "percent": 75.0}},
             "packages": {"launch": 75.0}}
    assert "| launch/b.py | 4 | 100.0 | 75.0 | -25.0 |" in script.coverage_table(before, after)


def test_docs_testing_md_tables_are_the_kept_profiles():
    script = _script()
    doc = (REPO / "docs" / "testing.md").read_text()
    assert script.render(doc) == doc, "docs/testing.md is stale: run python scripts/test_profile.py doc"
