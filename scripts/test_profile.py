"""Where the test suite's time goes, and what it covers in every process it starts.

    python scripts/test_profile.py run LABEL [pytest args...]   # e.g. run after tests
    python scripts/test_profile.py show LABEL                    # the tables, again
    python scripts/test_profile.py compare BEFORE AFTER          # coverage per module
    python scripts/test_profile.py keep LABEL                    # into docs/test-profiles/
    python scripts/test_profile.py doc                           # docs/testing.md's tables

`run` runs pytest (all of tests/ unless told otherwise) under coverage.py with its
subprocess patch, so every Python process the suite starts is measured: each rank under
horovodrun --gloo/--mpi and mpirun, MWMS workers, the local Slurm's jobs, the CLIs. A
hook installed for the run only (a .pth file in the venv, removed afterwards) logs each
Python process: the test that started it (pytest's PYTEST_CURRENT_TEST, which children
inherit), its command line, its life, and, for a training process, the seconds from its
start to the end of its first step. Results go to runs/test-profile/LABEL/:
  junit.xml        every test's time;
  processes.jsonl  one line per process start and end;
  profile.json     the summary: seconds and processes per file and per test, coverage
                   per module (combined over all processes).
`compare` prints the coverage table docs/testing.md carries, before against after.
Only this script and the tests' own launches are touched: nothing in horovod_train/.
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from a checkout
from scripts import doc_blocks  # noqa: E402

OUT = os.path.join(ROOT, "runs", "test-profile")
PACKAGES = ("horovod_train", "launch", "models")
LOG_VAR = "HT_PROCESS_LOG"
HOOK_NAME = "_ht_process_log"

# Runs at every Python start in the venv while installed; idle unless LOG_VAR is set.
HOOK = r'''
import atexit, json, os, sys, time
_path = os.environ.get("%(var)s")
if _path:
    _start = time.time()
    _test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]

    def _write(kind, **extra):
        line = json.dumps(dict(kind=kind, pid=os.getpid(), test=_test, t=time.time(), **extra))
        fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())  # one write: lines never interleave
        finally:
            os.close(fd)

    _first = []  # seconds from start to the end of the first training step, once known

    def _watch_trainer(module):
        # The Trainer object is gone by exit time: catch the figure when it is set.
        original = module.Trainer._one_step

        def _one_step(self, *args, **kwargs):
            original(self, *args, **kwargs)
            clock = getattr(self, "startup", None)
            if not _first and clock is not None and clock.done:
                _first.append(clock.ends["first_step"])
        module.Trainer._one_step = _one_step

    import importlib.abc, importlib.machinery

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "horovod_train.trainer":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                real = spec.loader.exec_module

                def exec_module(module):
                    real(module)
                    _watch_trainer(module)
                spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Finder())

    def _first_step():
        return _first[0] if _first else None

    def _end(code=None):
        try:
            _write("end", code=code, first_step_s=_first_step())
        except Exception:
            pass

    with open("/proc/self/cmdline", "rb") as _f:
        _argv = [a.decode(errors="replace") for a in _f.read().split(b"\0") if a]
    _write("start", argv=_argv[:8])
    atexit.register(_end)
    _real_exit = os._exit

    def _exit(code):
        _end(code)
        _real_exit(code)
    os._exit = _exit
''' % {"var": LOG_VAR}


def site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def install_hook():
    with open(os.path.join(site_packages(), HOOK_NAME + ".py"), "w") as f:
        f.write(HOOK)
    with open(os.path.join(site_packages(), HOOK_NAME + ".pth"), "w") as f:
        f.write(f"import {HOOK_NAME}\n")


def remove_hook():
    for ext in (".pth", ".py"):
        path = os.path.join(site_packages(), HOOK_NAME + ext)
        if os.path.exists(path):
            os.remove(path)


def run(label: str, pytest_args: list) -> dict:
    out = os.path.join(OUT, label)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "coverage"))
    env = dict(os.environ, **{LOG_VAR: os.path.join(out, "processes.jsonl"),
                              "HT_COVERAGE_DIR": os.path.join(out, "coverage")})
    args = pytest_args or ["tests"]
    cmd = [sys.executable, "-m", "coverage", "run", "--rcfile", os.path.join(ROOT, "setup.cfg"),
           "-m", "pytest", "-p", "no:cacheprovider", "--durations=0",
           f"--junitxml={os.path.join(out, 'junit.xml')}", *args]
    install_hook()
    start = time.time()
    try:
        code = subprocess.call(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    finally:
        remove_hook()
    wall = time.time() - start
    coverage = combine_coverage(out, env)
    profile = summarize(out, wall, code, coverage)
    with open(os.path.join(out, "profile.json"), "w") as f:
        json.dump(profile, f, indent=1)
    return profile


def combine_coverage(out: str, env: dict) -> dict:
    """Coverage per module (statements, missed, percent), every process combined."""
    rc = ["--rcfile", os.path.join(ROOT, "setup.cfg")]
    py = [sys.executable, "-m", "coverage"]
    subprocess.run(py + ["combine", *rc, "--keep", "-q"], cwd=ROOT, env=env, check=True)
    report = os.path.join(out, "coverage.json")
    subprocess.run(py + ["json", *rc, "-q", "-o", report], cwd=ROOT, env=env, check=True)
    with open(report) as f:
        files = json.load(f)["files"]
    return {os.path.relpath(path, ROOT) if os.path.isabs(path) else path:
            {"statements": d["summary"]["num_statements"],
             "missing": d["summary"]["missing_lines"],
             "percent": round(d["summary"]["percent_covered"], 1)}
            for path, d in files.items()}


def read_junit(path: str) -> list:
    """(file, test name, seconds, outcome) per test case."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname 'tests.unit.test_x' or 'tests.unit.test_x.TestClass'
        parts = [p for p in module if not p[:1].isupper()]
        file = "/".join(parts) + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        cases.append((file, case.get("name"), float(case.get("time", 0)), outcome))
    return cases


def read_processes(path: str) -> dict:
    """Per test node id: the processes it started (argv, seconds alive, first step)."""
    starts, ends = {}, {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                (starts if rec["kind"] == "start" else ends)[rec["pid"], rec["test"]] = rec
    per_test = collections.defaultdict(list)
    for key, rec in starts.items():
        if not rec["test"]:
            continue  # pytest itself, or a process started outside any test
        end = ends.get(key)
        per_test[rec["test"]].append({
            "argv": " ".join(rec["argv"])[:160],
            "alive_s": round(end["t"] - rec["t"], 2) if end else None,
            "first_step_s": end.get("first_step_s") if end else None})
    return per_test


def summarize(out: str, wall: float, code: int, coverage: dict) -> dict:
    cases = read_junit(os.path.join(out, "junit.xml"))
    procs = read_processes(os.path.join(out, "processes.jsonl"))
    files = collections.OrderedDict()
    tests = []
    for file, name, seconds, outcome in cases:
        node = f"{file}::{name}"
        mine = procs.get(node, [])
        trainers = [p["first_step_s"] for p in mine if p["first_step_s"]]
        tests.append({"test": node, "seconds": round(seconds, 2), "outcome": outcome,
                      "processes": len(mine), "trainers": len(trainers),
                      "before_first_step_s": round(sum(trainers), 1)})
        row = files.setdefault(file, {"tests": 0, "seconds": 0.0, "processes": 0,
                                      "before_first_step_s": 0.0})
        row["tests"] += 1
        row["seconds"] = round(row["seconds"] + seconds, 2)
        row["processes"] += len(mine)
        row["before_first_step_s"] = round(row["before_first_step_s"] + sum(trainers), 1)
    return {"wall_s": round(wall, 1), "exit_code": code, "files": files, "tests": tests,
            "coverage": coverage, "packages": package_coverage(coverage)}


def package_coverage(coverage: dict) -> dict:
    totals = {}
    for path, d in coverage.items():
        top = path.split("/", 1)[0]
        if top in PACKAGES:
            t = totals.setdefault(top, [0, 0])
            t[0] += d["statements"]
            t[1] += d["missing"]
    return {p: round(100 * (s - m) / s, 1) if s else None for p, (s, m) in totals.items()}


# ----------------------------------------------------------------------------- tables

def files_table(profile: dict, first_step: bool = True) -> str:
    """Files by seconds. first_step=False leaves out the seconds before the first step,
    for a run whose hook did not time them (the 'before' run of issue 38)."""
    rows = sorted(profile["files"].items(), key=lambda kv: -kv[1]["seconds"])
    head = ["file", "tests", "seconds", "processes"] + (["s before first step"] if first_step else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(name, tests, seconds, processes, before_first):
        cells = [name, tests, seconds, processes] + ([before_first] if first_step else [])
        return "| " + " | ".join(str(c) for c in cells) + " |"

    for file, r in rows:
        lines.append(row(file, r["tests"], f"{r['seconds']:.0f}", r["processes"],
                         f"{r['before_first_step_s']:.0f}"))
    lines.append(row(f"**all {sum(r['tests'] for _, r in rows)} tests**", "",
                     f"**{sum(r['seconds'] for _, r in rows):.0f}**",
                     sum(r["processes"] for _, r in rows),
                     f"{sum(r['before_first_step_s'] for _, r in rows):.0f}"))
    return "\n".join(lines)


def slow_tests_table(profile: dict, top: int = 40) -> str:
    rows = sorted((t for t in profile["tests"] if t["processes"]), key=lambda t: -t["seconds"])
    lines = ["| test | seconds | processes | training processes | s before first step |",
             "|---|---|---|---|---|"]
    for t in rows[:top]:
        lines.append(f"| {t['test']} | {t['seconds']:.0f} | {t['processes']} | {t['trainers']} | "
                     f"{t['before_first_step_s']:.0f} |")
    return "\n".join(lines)


def coverage_table(before: dict, after: dict) -> str:
    """Per module of PACKAGES: percent before, after, and the change."""
    lines = ["| module | statements | before % | after % | change |", "|---|---|---|---|---|"]
    modules = sorted(p for p in set(before["coverage"]) | set(after["coverage"])
                     if p.split("/", 1)[0] in PACKAGES)
    for path in modules:
        b, a = before["coverage"].get(path), after["coverage"].get(path)
        pb = f"{b['percent']:.1f}" if b else "-"
        pa = f"{a['percent']:.1f}" if a else "-"
        change = f"{a['percent'] - b['percent']:+.1f}" if a and b else "new" if a else "gone"
        lines.append(f"| {path} | {(a or b)['statements']} | {pb} | {pa} | {change} |")
    for pkg in PACKAGES:
        lines.append(f"| **{pkg}/** | | {before['packages'].get(pkg)} | "
                     f"{after['packages'].get(pkg)} | |")
    return "\n".join(lines)


def load(label: str) -> dict:
    with open(os.path.join(OUT, label, "profile.json")) as f:
        return json.load(f)


# ------------------------------------------------------------------ docs/testing.md

KEPT = os.path.join(ROOT, "docs", "test-profiles")  # trimmed profiles the doc is made from
DOC = os.path.join(ROOT, "docs", "testing.md")
TOP_TESTS = 25


def keep(label: str) -> str:
    """Stores a run's profile, trimmed to what the doc shows, as docs/test-profiles/LABEL.json."""
    profile = load(label)
    slow = sorted((t for t in profile["tests"] if t["processes"]), key=lambda t: -t["seconds"])
    kept = {"wall_s": profile["wall_s"], "files": profile["files"],
            "tests": slow[:TOP_TESTS], "coverage": profile["coverage"],
            "packages": profile["packages"]}
    os.makedirs(KEPT, exist_ok=True)
    path = os.path.join(KEPT, f"{label}.json")
    with open(path, "w") as f:
        json.dump(kept, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def kept(label: str) -> dict:
    with open(os.path.join(KEPT, f"{label}.json")) as f:
        return json.load(f)


def sections() -> dict:
    """The doc's generated sections, by marker name, from the kept profiles."""
    before, after = kept("before"), kept("after")
    # The first-step timer was fixed after the 'before' run: its figures there are partial.
    return {"files-before": files_table(before, first_step=False), "files-after": files_table(after),
            "tests-after": slow_tests_table(after, TOP_TESTS),
            "coverage": coverage_table(before, after)}


def render(doc: str) -> str:
    """`doc` with each <!-- begin NAME --> ... <!-- end NAME --> block made anew."""
    return doc_blocks.fill(doc, sections(), DOC, "scripts/test_profile.py's sections()")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the suite under coverage and the process log")
    r.add_argument("label")
    r.add_argument("pytest_args", nargs=argparse.REMAINDER)
    s = sub.add_parser("show", help="print the tables of an earlier run")
    s.add_argument("label")
    c = sub.add_parser("compare", help="coverage per module, before against after")
    c.add_argument("before")
    c.add_argument("after")
    k = sub.add_parser("keep", help="store a run's trimmed profile in docs/test-profiles/")
    k.add_argument("label")
    sub.add_parser("doc", help="rewrite docs/testing.md's tables from docs/test-profiles/")
    args = parser.parse_args(argv)
    if args.command == "compare":
        print(coverage_table(load(args.before), load(args.after)))
        return 0
    if args.command == "keep":
        print(f"wrote {keep(args.label)}")
        return 0
    if args.command == "doc":
        with open(DOC) as f:
            doc = f.read()
        with open(DOC, "w") as f:
            f.write(render(doc))
        print(f"wrote {DOC}")
        return 0
    profile = run(args.label, args.pytest_args) if args.command == "run" else load(args.label)
    print(files_table(profile), "\n")
    print(slow_tests_table(profile), "\n")
    print(f"wall {profile['wall_s']:.0f} s, pytest exit {profile['exit_code']}; "
          f"coverage {profile['packages']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
