"""Runs one of Horovod's own TF2 test files against an API module, as a yardstick.

    python scripts/horovod_keras_suite.py FILE [--markdown docs/horovod_keras_suite.md]
    python scripts/horovod_keras_suite.py --horovod_repo DIR --module horovod.tensorflow.keras
    python scripts/horovod_keras_suite.py --suite tensorflow --horovod_repo DIR \
        --module horovod.tensorflow --controller mpi --markdown docs/horovod_tensorflow_suite.md

--suite keras (the default) runs test/parallel/test_tensorflow2_keras.py against a Keras API
module (horovod_train.keras); --suite tensorflow runs test/parallel/test_tensorflow.py, the
TF core API file, against horovod_train.tensorflow, with the two helper files it imports
(test/parallel/base_test_tensorflow.py, test/utils/common.py), laid out as in Horovod's tree.
The files are written for Keras 2 and an older TF, so they are mended at run time, in a temp
dir, by the named rewrites of the suite (MENDS, TF_MENDS): only the test code's own
Keras/TF usage (never what a test asserts of the API), and its Horovod imports, which become
the module under test. pytest then runs in each of 2 ranks under horovodrun, as Horovod's CI
runs it, each rank writing its own junit file; one table row a test (parameterized cases
apart; a test TF runs in graph and eager mode is one row, failed if either mode failed).
Exit 0 when it ran, 2 on bad input.
"""
import argparse
import collections
import datetime
import glob
import importlib.metadata
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(PY), "horovodrun")
REPO_PLACEHOLDER = "HOROVOD_GIT_DIR"  # a clone's .git, e.g. of github.com/horovod/horovod
FILE_NAME = "test_tensorflow2_keras.py"
HOROVOD_MODULE = "horovod.tensorflow.keras"
NEEDED = ("pytest", "parameterized", "packaging")  # what the test file itself imports
MARK = "HVD_KERAS_SUITE_RUN"  # in every rank's environment: finds them after a timeout


class BadInput(Exception):
    """Input the suite cannot run on; the message says what came, what was wanted, the fix."""


# pattern: a multiline regex; replacement: re.sub's, which may name {module}, {keras_module}
# path: the file it mends, relative to Horovod's test/ dir; None: the test file itself
Mend = collections.namedtuple("Mend", "name pattern replacement why path", defaults=(None,))

VARIABLE_KEY_WHY = ("Keras 3 layer weights are keras.Variable, which has no tf.Variable.ref(); "
                    "its TF-backend .value is the tf.Variable, so both kinds key a dict alike")


def variable_key_mends(anchor):
    """The test's own .ref() keys of Keras weights, and the helper, defined before `anchor`."""
    return (
        Mend("variable-ref", r"\b(\w+)\.ref\(\)", r"_variable_key(\1)",
             "the test keys Keras weights by .ref(); before variable-key-helper, whose .ref() "
             "stays"),
        Mend("variable-key-helper", rf"^({anchor})",
             "def _variable_key(v):\n"
             "    return v.ref() if hasattr(v, 'ref') else v.value.ref()\n\n\n\\1",
             VARIABLE_KEY_WHY))


MENDS = (
    Mend("import-hvd", r"^import horovod\.tensorflow\.keras as hvd$", "import {module} as hvd",
         "the module under test stands where the file imports Horovod's TF Keras API"),
    Mend("import-hvd-keras", r"^import horovod\.keras as hvd_keras$",
         "import {keras_module} as hvd_keras",
         "likewise for the standalone-Keras API (kept as horovod.keras when Horovod is tested)"),
    Mend("lr-argument", r"(optimizers\.(?:legacy\.)?\w+)\(lr=", r"\1(learning_rate=",
         "Keras 3 optimizers refuse the Keras 2 alias lr= ('Argument(s) not recognized')"),
    Mend("lr-attribute", r"\.optimizer\.lr\b", ".optimizer.learning_rate",
         "Keras 3 optimizers have no .lr alias of .learning_rate"),
    Mend("run-tf-function", r",\s*experimental_run_tf_function=False", "",
         "Keras 3 compile() refuses this TF 2.0-2.1 argument"),
    Mend("mse-name", r"keras\.losses\.mean_squared_error\b", "keras.losses.mse",
         "tf.keras under Keras 3 names the same MSE function mse/MSE only"),
    Mend("legacy-skip", r"if not hasattr\(keras\.optimizers, 'legacy'\):",
         "if not hasattr(keras.optimizers, 'legacy') or int(keras.__version__.split('.')[0]) >= 3:",
         "Keras 3 keeps a keras.optimizers.legacy stub whose optimizers raise ImportError, so "
         "the test's own 'legacy optimizers not available' skip is made to see that"),
    Mend("optimizer-learning-rate", r"super\(\)\.__init__\(name=name, \*\*kwargs\)",
         "super().__init__(name=name, learning_rate=kwargs.pop('learning_rate', 0.1), **kwargs)",
         "a Keras 3 Optimizer requires learning_rate (the Keras 2.11 _build_learning_rate hook "
         "setting the same 0.1 is gone); a wrapper rebuilding it from config passes its own"),
    Mend("update-step-signature", r"def update_step\(self, gradient, variable\):",
         "def update_step(self, gradient, variable, learning_rate=None):",
         "Keras 3 calls update_step(gradient, variable, learning_rate)"),
    *variable_key_mends("_PRE_TF_2_2_0 = "),
    Mend("aggregate-argument", r",\s*experimental_aggregate_gradients=False", "",
         "Keras 3 apply_gradients(grads_and_vars) has no such argument; it never aggregates "
         "across replicas itself, which is what the TF 2.2 argument switched off"),
)

TF_MENDS = (
    Mend("import-hvd", r"^import horovod\.tensorflow as hvd$", "import {module} as hvd",
         "the module under test stands where the file imports Horovod's TF API"),
    Mend("batchnorm-fused", r"BatchNormalization\(axis=1, fused=False\)",
         "BatchNormalization(axis=1)",
         "Keras 3 BatchNormalization refuses fused= (Keras 2's choice of kernel, same math); the "
         "plain layer is the reference the test compares hvd.SyncBatchNormalization with"),
    *variable_key_mends("_IS_TF2 = "),
    Mend("mock-stdlib", r"^import mock$", "from unittest import mock",
         "the helper file imports the mock backport, which is not installed here; unittest.mock "
         "is the same API in the standard library", path="utils/common.py"),
)

# One suite a Horovod test file: where it lives, the helper files it imports (paths
# relative to Horovod's test/ dir, as is its own), its mends, what it imports.
Suite = collections.namedtuple(
    "Suite", "name test_path helpers horovod_module default_module mends needed")
SUITES = {
    "keras": Suite("keras", "parallel/test_tensorflow2_keras.py", (), HOROVOD_MODULE,
                   "horovod_train.keras", MENDS, NEEDED),
    "tensorflow": Suite("tensorflow", "parallel/test_tensorflow.py",
                        ("parallel/base_test_tensorflow.py", "utils/common.py"),
                        "horovod.tensorflow", "horovod_train.tensorflow", TF_MENDS,
                        ("pytest", "packaging", "cloudpickle")),
}


def mend_lines(applied, code="") -> list:
    """'name (N matches): why', NOT MATCHED standing out, for the console and the doc."""
    return [f"{code}{m.name}{code} ({n} match{'es' if n != 1 else ''}"
            f"{', NOT MATCHED' if n == 0 else ''}): {m.why}" for m, n in applied]


def keras_module_for(module: str) -> str:
    """Horovod's own run keeps horovod.keras (PartialDistributedOptimizer lives only there)."""
    return "horovod.keras" if module == HOROVOD_MODULE else module


def apply_mends(source: str, module: str, mends=MENDS, path=None):
    """(mended source, [(mend, count)]): each of the mends for the file at `path` (None:
    the test file) applied everywhere it matches."""
    applied = []
    for mend in (m for m in mends if m.path == path):
        replacement = mend.replacement.format(module=module, keras_module=keras_module_for(module))
        source, count = re.subn(mend.pattern, replacement, source, flags=re.M)
        applied.append((mend, count))
    return source, applied


def read_source(path, horovod_repo, ref="HEAD", rel=None) -> str:
    """A file's text, from a path or from a bare git dir of Horovod (at test/rel there;
    default rel: the Keras test file)."""
    rel = rel or SUITES["keras"].test_path
    name = os.path.basename(rel)
    if (path is None) == (horovod_repo is None):
        raise BadInput(f"got file={path!r} and --horovod_repo={horovod_repo!r}; expected exactly "
                       f"one of them; fix: pass the path of {name} or --horovod_repo DIR")
    if path is not None:
        if not os.path.isfile(path):
            raise BadInput(f"got {path!r}, which is not a file; expected Horovod's {name}; "
                           f"fix: pass its path in Horovod's test/ tree, or --horovod_repo DIR "
                           f"to take it from git")
        with open(path, encoding="utf-8") as f:
            return f.read()
    proc = subprocess.run(["git", "--git-dir", horovod_repo, "show", f"{ref}:test/{rel}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"got --horovod_repo {horovod_repo!r}, where git show {ref}:test/{rel} "
                       f"failed ({(proc.stderr.strip().splitlines() or ['?'])[-1]}); expected a "
                       f"Horovod git dir; fix: pass the repo's .git (or bare) directory")
    return proc.stdout


def mended_files(suite, test_file, horovod_repo, ref, module):
    """({path under test/: mended text}, [(mend, count)]) for the suite's test file and its
    helpers; with a test_file path, the helpers come from the test/ tree it lies in."""
    files, applied = {}, []
    tree = test_file and os.path.dirname(os.path.dirname(os.path.abspath(test_file)))
    for rel in (suite.test_path, *suite.helpers):
        path = test_file if rel == suite.test_path or not test_file else os.path.join(tree, rel)
        source = read_source(path, horovod_repo, ref, rel)
        files[rel], counts = apply_mends(source, module, suite.mends,
                                         None if rel == suite.test_path else rel)
        applied += counts
    return files, applied


def check_importable(module: str, python=PY, timeout=300, suite=None):
    """Imports the module, and what the test file needs, in a child (TF stays out of here)."""
    suite = suite or SUITES["keras"]
    needed = NEEDED if suite.name == "keras" else suite.needed  # NEEDED: patchable in tests
    names = [module, *needed]
    code = ("import importlib, sys\nfor n in sys.argv[1:]:\n"
            "    try: importlib.import_module(n)\n"
            "    except Exception as e:\n"
            "        print(n + '\\t' + type(e).__name__ + ': ' + str(e)); sys.exit(1)")
    proc = subprocess.run([python, "-c", code, *names], capture_output=True, text=True,
                          env=child_env(), timeout=timeout)
    if proc.returncode != 0:
        name, _, what = (proc.stdout.strip().splitlines() or
                         ["?\t" + proc.stderr.strip()[-200:]])[0].partition("\t")
        fix = (f"pip install {name}" if name in needed else f"pass --module "
               f"{suite.default_module} or {suite.horovod_module}, and run from the repo's "
               "virtualenv")
        raise BadInput(f"got --module {module!r}, but importing {name} failed: {what}; expected "
                       f"it and the test file's {', '.join(needed)} to import; fix: {fix}")


def child_env() -> dict:
    """One intra-op/OMP thread a rank (2 ranks on 2 cores), quiet TF, no GPU, repo on path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "HOROVOD_RANK", "HOROVOD_SIZE", "PMI_"))}
    env.update(OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONDONTWRITEBYTECODE="1")
    return env


# Each rank runs this: pytest, a junit file named by its rank, and a progress file written
# as each test goes, so a run cut off by the timeout (no junit then) shows what hung.
RANK_WRAPPER = """
import json, os, sys, pytest
rank = os.environ.get('HOROVOD_RANK') or os.environ.get('OMPI_COMM_WORLD_RANK') or '0'
out, args = sys.argv[1], sys.argv[2:]
log = open(os.path.join(out, 'rank%s.progress' % rank), 'a', buffering=1)  # rounds add
class Progress:
    def pytest_runtest_logstart(self, nodeid, location):
        log.write(json.dumps(dict(test=nodeid, when='start', outcome='started')) + '\\n')
    def pytest_runtest_logreport(self, report):
        crash = getattr(report.longrepr, 'reprcrash', None)
        text = crash.message if crash else report.longrepr
        text = text[-1] if isinstance(text, tuple) else str(text or '')  # a skip's reason
        log.write(json.dumps(dict(test=report.nodeid, when=report.when,
                                  outcome=report.outcome, message=text)) + '\\n')
junit = '--junitxml=' + os.path.join(out, 'rank%s.xml' % rank)
sys.exit(pytest.main([*args, junit], plugins=[Progress()]))
"""


def launch_argv(test_file, out_dir, controller="gloo", np_=2, pytest_args=()):
    return [HOROVODRUN, "-np", str(np_), "-H", f"localhost:{np_}", f"--{controller}",
            PY, "-c", RANK_WRAPPER, out_dir, "-v", "-p", "no:cacheprovider",
            *pytest_args, test_file]


def kill_marked(mark: str):
    """Kills, by pid, the live processes whose environment carries this run's mark."""
    needle = f"{MARK}={mark}".encode()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if int(name) != os.getpid() and needle in f.read().split(b"\0"):
                    os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue  # gone already, or not ours to read


def _last_change(paths) -> float:
    return max([os.path.getmtime(p) for p in paths if os.path.exists(p)], default=0.0)


def run_suite(argv, cwd, log_path, timeout, progress=(), test_timeout=None, mode="w"):
    """Exit code of the launcher, "TIMEOUT", or "STALLED" when no progress file grew for
    test_timeout seconds (a test hangs: a collective one rank never joins); on either,
    everything it started is killed."""
    mark = uuid.uuid4().hex
    start, started_at = time.monotonic(), time.time()
    with open(log_path, mode) as log:
        proc = subprocess.Popen(argv, cwd=cwd, env={**child_env(), MARK: mark},
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        outcome = None
        while outcome is None:
            try:
                return proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                if time.monotonic() - start > timeout:
                    outcome = "TIMEOUT"
                elif test_timeout and time.time() - max(_last_change(progress),
                                                        started_at) > test_timeout:
                    outcome = "STALLED"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kill_marked(mark)  # horovodrun starts ranks in sessions of their own
        return outcome


def reported_tests(progress_texts) -> list:
    """The node ids any rank's progress file started (a rerun deselects them)."""
    ids = []
    for text in progress_texts:
        for line in text.splitlines():
            try:
                test = json.loads(line)["test"]
            except (ValueError, KeyError):
                continue
            if test not in ids:
                ids.append(test)
    return ids


def run_rounds(args, test_file, work, extra):
    """Runs the suite; after a hung test, kills the job and runs the tests no rank started
    yet, again (the hung test stays 'hung'), within --timeout in all. Returns (the last
    round's exit code, the hung rounds' count)."""
    log_path = os.path.join(work, "launcher.log")
    progress = [os.path.join(work, f"rank{r}.progress") for r in range(args.np_)]
    deadline, stalls, deselect = time.monotonic() + args.timeout, 0, []
    while True:
        argv_run = launch_argv(test_file, work, args.controller, args.np_,
                               [*extra, *(f"--deselect={t}" for t in deselect)])
        code = run_suite(argv_run, os.path.dirname(test_file), log_path,
                         max(1.0, deadline - time.monotonic()), progress, args.test_timeout,
                         "a" if stalls else "w")
        if code != "STALLED":
            return code, stalls
        stalls += 1
        for path in glob.glob(os.path.join(work, "rank*.xml")):  # junit of a cut round
            os.remove(path)
        deselect = reported_tests([open(p).read() for p in progress if os.path.exists(p)])


# status: passed, failed, error, skipped, hung (cut off by the timeout), missing
Outcome = collections.namedtuple("Outcome", "status message", defaults=("",))


def one_line(text: str, limit=150) -> str:
    """Exception type and first line; inside a tf.function that is the wrapped error's."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    if line.endswith("in user code:"):  # autograph re-raises with the real error last
        inner = [ln for ln in lines[1:] if re.match(r"\w+(Error|Exception|Exit)\b.*:", ln)]
        line = inner[-1] + " (in tf.function)" if inner else line
    return line if len(line) <= limit else line[:limit - 3] + "..."


def parse_junit(xml_text: str) -> dict:
    """{test name: Outcome} from one rank's junit XML; TF's inherited test_session is dropped."""
    status = {"failure": "failed", "error": "error", "skipped": "skipped"}
    results = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        # A test run as subtests (TF's graph and eager modes) has one child per mode that did
        # not pass: a failure outranks an error, which outranks a skip, in any order.
        children = sorted((c for c in case if c.tag in status), key=lambda c: list(status).index(c.tag))
        results[case.get("name")] = next(
            (Outcome(status[c.tag], one_line(c.get("message") or c.text or ""))
             for c in children), Outcome("passed"))
    # tf.test.TestCase.test_session: a helper pytest collects by its name, and skips
    return {n: o for n, o in results.items() if o.message != "Not a test."}


def parse_progress(text: str) -> dict:
    """{test name: Outcome} from a rank's progress file; a test started, never reported: hung."""
    results = {}
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short when the rank was killed
        name, outcome, when = event["test"].split("::")[-1], event["outcome"], event["when"]
        message = one_line(event.get("message", ""))
        if results.get(name, Outcome("")).status in ("failed", "error"):
            continue  # a teardown after a failure does not undo it
        if outcome == "started":
            results[name] = Outcome("hung", "no result before the timeout")
        elif outcome == "failed":
            results[name] = Outcome("failed" if when == "call" else "error", message)
        elif outcome == "skipped":
            results[name] = Outcome("skipped", message)
        elif when == "call" and results.get(name, Outcome("")).status != "skipped":
            # a test run as subtests (graph and eager mode) that skipped in one stays
            # skipped, as junit has it
            results[name] = Outcome("passed")
    return {n: o for n, o in results.items() if not o.message.endswith("Not a test.")}


def read_ranks(out_dir: str, np_=2, junit=True) -> list:
    """One {name: Outcome} a rank, from junit, else its progress file; None: neither."""
    ranks = []
    for rank in range(np_):
        path = os.path.join(out_dir, f"rank{rank}")
        if junit and os.path.exists(path + ".xml"):
            ranks.append(parse_junit(open(path + ".xml").read()))
        else:  # cut off before pytest wrote junit: what the progress file saw
            ranks.append(parse_progress(open(path + ".progress").read())
                         if os.path.exists(path + ".progress") else None)
    return ranks


def build_rows(ranks: list) -> list:
    """[(name, [status a rank], error line)], in the order the first report has them."""
    names = []
    for results in ranks:
        names += [n for n in (results or {}) if n not in names]
    rows = []
    for name in names:
        got = [r.get(name, Outcome("missing")) if r is not None else Outcome("no report")
               for r in ranks]
        errors = [o.message for o in got if o.status in ("failed", "error")]
        rows.append((name, [o.status for o in got], errors[0] if errors else ""))
    return rows


def summary(rows) -> str:
    """A test passes when it passes on every rank; anything else on some rank is a failure."""
    verdicts = [next((v for v in ("passed", "skipped") if all(c == v for c in cells)), "failed")
                for _, cells, _ in rows]
    return (f"{verdicts.count('passed')} of {len(rows)} passed on every rank, "
            f"{verdicts.count('failed')} failed, {verdicts.count('skipped')} skipped")


def text_table(rows, np_=2) -> str:
    head = ["test", *[f"rank {r}" for r in range(np_)], "error (first failing rank)"]
    body = [[name, *cells, err] for name, cells, err in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = ["  ".join(str(x[i]).ljust(widths[i]) for i in range(len(widths))) + "  " + x[-1]
             for x in [head, *body]]
    return "\n".join(lines)


def tree_state(module: str) -> str:
    """Horovod's version; for ours, the commit and whether horovod_train/ differs from it."""
    if module.startswith("horovod."):
        try:
            return "Horovod " + importlib.metadata.version("horovod")
        except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH
            return "Horovod (no installed version)"
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout
    dirty = git("status", "--porcelain", "--", "horovod_train").strip()
    return git("rev-parse", "--short", "HEAD").strip() + (
        " + uncommitted changes in horovod_train/" if dirty else "")


def shown_command(argv) -> str:
    """The command as the doc shows it: this machine's Horovod git dir is no reader's, so
    --horovod_repo's value is a placeholder, and --keep's scratch dir is left out."""
    shown, hide, drop = [], False, False
    for arg in argv:
        if drop or arg.startswith("--keep="):  # a scratch dir of this machine: no result
            drop = False
            continue
        if hide:
            arg, hide = REPO_PLACEHOLDER, False
        elif arg == "--keep":
            drop = True
            continue
        elif arg == "--horovod_repo":
            hide = True
        elif arg.startswith("--horovod_repo="):
            arg = f"--horovod_repo={REPO_PLACEHOLDER}"
        shown.append(shlex.quote(arg))
    return " ".join(["python scripts/horovod_keras_suite.py", *shown])


def section_key(module, controller="gloo") -> str:
    """A section's marker: the module, and the controller unless it is Gloo (the default,
    whose sections predate the controller in the key)."""
    return module if controller == "gloo" else f"{module}:{controller}"


def markdown_section(module, rows, applied, command, code, np_=2, state="",
                     controller="gloo") -> str:
    """One module's section: date, command, mends, table, counts (between markers)."""
    today = datetime.date.today().isoformat()
    key = section_key(module, controller)
    lines = [f"<!-- suite:{key} -->", f"## `{module}`, {controller} ({today})", "",
             f"Command: `{command}`  ", f"Code: {state or 'not recorded'}  ",
             f"Launcher exit code: {code}", "", "Mends applied:", ""]
    lines += [f"- {line}" for line in mend_lines(applied, code="`")]
    ranks = " | ".join(f"rank {r}" for r in range(np_))
    lines += ["", f"| test | {ranks} | error (first failing rank) |",
              "|" + " --- |" * (np_ + 2)]
    for name, cells, err in rows:
        err = err.replace("|", "\\|").replace("`", "'")  # a table cell, as markdown reads it
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {err} |")
    lines += ["", f"**{summary(rows)}.**", f"<!-- /suite:{key} -->"]
    return "\n".join(lines)


def doc_head(suite=None) -> str:
    suite = suite or SUITES["keras"]
    title = "Keras" if suite.name == "keras" else "TensorFlow"
    return (f"# Horovod's {title} test suite as a yardstick\n\nHorovod's own "
            f"`test/{suite.test_path}`, mended for Keras 3 at run time, run by pytest in 2 ranks "
            "under horovodrun against each module below (sections written by "
            f"`scripts/horovod_keras_suite.py{'' if suite.name == 'keras' else ' --suite ' + suite.name}`).\n")


DOC_HEAD = doc_head()


def write_markdown(path, module, section, suite=None):
    """Replaces the section with this key (a module, or module:controller) in the file
    (other text and sections stay)."""
    text = open(path).read() if os.path.exists(path) else doc_head(suite)
    mark = re.escape(module)
    pattern = re.compile(rf"<!-- suite:{mark} -->.*?<!-- /suite:{mark} -->", re.S)
    text = pattern.sub(lambda _m: section, text) if pattern.search(text) else \
        text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("test_file", nargs="?", help=f"Horovod's {FILE_NAME} (or, with --suite "
                   "tensorflow, test_tensorflow.py, its helpers taken from the same test/ tree)")
    p.add_argument("--suite", choices=sorted(SUITES), default="keras",
                   help="keras: test_tensorflow2_keras.py; tensorflow: test_tensorflow.py")
    p.add_argument("--horovod_repo", help="a Horovod git dir to take the test file from")
    p.add_argument("--ref", default="HEAD", help="the commit to take it at (with --horovod_repo)")
    p.add_argument("--module", help="the API under test (default: horovod_train.keras, or "
                   "horovod_train.tensorflow with --suite tensorflow)")
    p.add_argument("--controller", choices=("gloo", "mpi"), default="gloo")
    p.add_argument("--np", type=int, default=2, dest="np_", help="ranks (Horovod's CI: 2)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    p.add_argument("--test_timeout", type=float, default=120.0,
                   help="seconds without a test event before the run counts the current test "
                   "as hung, is killed, and goes on with the tests not started (0: never)")
    p.add_argument("--markdown", help="also write the table into this markdown file")
    p.add_argument("--keep", help="keep the mended file, logs and junit files in this dir")
    p.add_argument("-k", dest="select", help="pytest -k expression (a subset, for a quick look)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    suite = SUITES[args.suite]
    args.module = args.module or suite.default_module
    try:
        if not os.path.exists(HOROVODRUN) or args.np_ < 1:
            raise BadInput(f"got {HOROVODRUN} (exists: {os.path.exists(HOROVODRUN)}) and --np "
                           f"{args.np_}; expected horovodrun beside this python and --np >= 1; "
                           f"fix: run with the virtualenv's python (make setup builds Horovod)")
        files, applied = mended_files(suite, args.test_file, args.horovod_repo, args.ref,
                                      args.module)
        check_importable(args.module, suite=suite)
    except BadInput as e:
        print(f"horovod_keras_suite: {e}", file=sys.stderr)
        return 2
    print("mends:\n" + "\n".join(f"  {line}" for line in mend_lines(applied)))
    work = args.keep or tempfile.mkdtemp(prefix=f"hvd-{suite.name}-suite-")
    for stale in glob.glob(os.path.join(work, "rank*.*")):  # a kept dir's earlier run
        os.remove(stale)
    for rel, text in files.items():  # laid out as in Horovod's tree: test/parallel, test/utils
        os.makedirs(os.path.dirname(os.path.join(work, "test", rel)), exist_ok=True)
        with open(os.path.join(work, "test", rel), "w") as f:
            f.write(text)
    test_file = os.path.join(work, "test", suite.test_path)
    extra = ["-k", args.select] if args.select else []
    code, stalls = run_rounds(args, test_file, work, extra)
    log_path = os.path.join(work, "launcher.log")
    # After a restart, the last round's junit knows only its own tests: read progress files.
    ranks = read_ranks(work, args.np_, junit=not stalls)
    if stalls:
        code = f"{code} after {stalls} restart{'s' if stalls > 1 else ''} past hung tests"
    rows = build_rows(ranks)
    state = tree_state(args.module)
    print(f"\nmodule {args.module}, {args.controller}, {args.np_} ranks, launcher exit {code}, "
          f"code: {state} (log: {log_path})\n")
    print(text_table(rows, args.np_))
    print(f"\n{summary(rows)}")
    if code != 0 and not isinstance(code, int) or any(r is None for r in ranks):
        print(f"\n(timed out, restarted past a hung test, or a rank wrote no report; the "
              f"log's last lines:)\n"
              + "\n".join(open(log_path, errors="replace").read().splitlines()[-15:]))
    if args.markdown:
        shown = shown_command(argv if argv is not None else sys.argv[1:])
        write_markdown(args.markdown, section_key(args.module, args.controller),
                       markdown_section(args.module, rows, applied, shown, code, args.np_, state,
                                        args.controller), suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
