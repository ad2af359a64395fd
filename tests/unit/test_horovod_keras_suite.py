"""The Horovod-suite runner's pure parts: the mends, junit and progress parsing into the
table, the markdown section, and the bad-input refusals. No TF, no ranks."""
import importlib.util
import os

import pytest

from helpers import ROOT

_spec = importlib.util.spec_from_file_location(
    "horovod_keras_suite", os.path.join(ROOT, "scripts", "horovod_keras_suite.py"))
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)

# A made-up file in the Keras 2 style the mends are for (not Horovod's text).
SOURCE = """import horovod.keras as hvd_keras
import horovod.tensorflow.keras as hvd

_PRE_TF_2_2_0 = False

def test_a(self):
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr=0.5))
    net.compile(loss=keras.losses.mean_squared_error, optimizer=opt,
                experimental_run_tf_function=False)
    assert self.model.optimizer.lr.numpy() == 0.5
    if not hasattr(keras.optimizers, 'legacy'):
        self.skipTest("none")
    keys = [w.ref() for w in net.weights]
    assert keys[0] == w0.ref()

class Opt(Optimizer):
    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
    def update_step(self, gradient, variable):
        variable.assign_add(gradient)

step(var_list=vs,
     experimental_aggregate_gradients=False)
"""


def mended(module="horovod_train.keras"):
    text, applied = suite.apply_mends(SOURCE, module)
    return text, {mend.name: count for mend, count in applied}


def test_every_mend_rewrites_its_keras2_usage():
    text, counts = mended()
    assert "import horovod_train.keras as hvd\n" in text
    assert "import horovod_train.keras as hvd_keras\n" in text
    assert "SGD(learning_rate=0.5)" in text and "lr=" not in text
    assert "self.model.optimizer.learning_rate.numpy() == 0.5" in text
    assert "experimental_run_tf_function" not in text
    assert "keras.losses.mse," in text
    assert "int(keras.__version__.split('.')[0]) >= 3" in text
    assert "learning_rate=kwargs.pop('learning_rate', 0.1), **kwargs)" in text
    assert "def update_step(self, gradient, variable, learning_rate=None):" in text
    assert "step(var_list=vs)" in text
    assert "keys = [_variable_key(w) for w in net.weights]" in text
    assert "def _variable_key(v):\n    return v.ref() if hasattr(v, 'ref')" in text
    assert all(counts[m.name] >= 1 for m in suite.MENDS), counts


def test_mends_keep_what_is_asserted_and_report_no_match():
    text, _ = mended()
    asserts = [ln.split("assert", 1)[1] for ln in text.splitlines() if "assert " in ln]
    assert asserts == [" self.model.optimizer.learning_rate.numpy() == 0.5",
                       " keys[0] == _variable_key(w0)"]
    _, applied = suite.apply_mends("x = 1\n", "horovod_train.keras")
    assert [count for _, count in applied] == [0] * len(suite.MENDS)


def test_horovods_own_run_keeps_horovod_keras_for_the_standalone_api():
    text, _ = mended("horovod.tensorflow.keras")
    assert "import horovod.keras as hvd_keras\n" in text
    assert "import horovod.tensorflow.keras as hvd\n" in text


def test_mends_are_named_explained_and_unique():
    names = [m.name for m in suite.MENDS]
    assert len(names) == len(set(names))
    assert all(m.why and m.pattern for m in suite.MENDS)


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="t.Tf2KerasTests" name="test_ok" time="0.1"/>
<testcase classname="t.Tf2KerasTests" name="test_bad_0" time="0.1">
  <failure message="TypeError: got an unexpected keyword&#10;more lines">trace</failure></testcase>
<testcase classname="t.Tf2KerasTests" name="test_graph" time="0.1">
  <failure message="AttributeError: in user code:&#10;&#10;  File x, line 3&#10;&#10;  AttributeError: no attribute '_agg_helper'">t</failure></testcase>
<testcase classname="t.Tf2KerasTests" name="test_skip" time="0.0">
  <skipped type="pytest.skip" message="Only one worker available">s</skipped></testcase>
<testcase classname="t.Tf2KerasTests" name="test_session" time="0.0">
  <skipped type="pytest.skip" message="Not a test.">s</skipped></testcase>
<testcase classname="t.Tf2KerasTests" name="test_setup" time="0.0">
  <error message="failed on setup with &quot;OSError: x&quot;">e</error></testcase>
</testsuite></testsuites>"""


def test_junit_gives_one_outcome_a_test_and_drops_tfs_test_session():
    results = suite.parse_junit(JUNIT)
    assert list(results) == ["test_ok", "test_bad_0", "test_graph", "test_skip", "test_setup"]
    assert results["test_ok"] == suite.Outcome("passed")
    assert results["test_bad_0"] == suite.Outcome("failed", "TypeError: got an unexpected keyword")
    assert results["test_graph"].message == \
        "AttributeError: no attribute '_agg_helper' (in tf.function)"
    assert results["test_skip"].status == "skipped"
    assert results["test_setup"].status == "error"


def test_rows_show_each_rank_and_the_first_error():
    other = suite.parse_junit(JUNIT)
    other["test_ok"] = suite.Outcome("failed", "AssertionError: ranks differ")
    del other["test_setup"]
    rows = suite.build_rows([suite.parse_junit(JUNIT), other])
    assert rows[0] == ("test_ok", ["passed", "failed"], "AssertionError: ranks differ")
    assert rows[-1] == ("test_setup", ["error", "missing"], 'failed on setup with "OSError: x"')
    assert suite.summary(rows) == "0 of 5 passed on every rank, 4 failed, 1 skipped"
    lone = suite.build_rows([{"test_ok": suite.Outcome("passed")}, None])
    assert lone == [("test_ok", ["passed", "no report"], "")]
    assert "test_ok  passed  no report" in suite.text_table(lone)


def test_progress_file_shows_a_hung_test_and_keeps_failures():
    events = [
        '{"test": "f.py::T::test_a", "when": "start", "outcome": "started", "message": ""}',
        '{"test": "f.py::T::test_a", "when": "call", "outcome": "passed", "message": ""}',
        '{"test": "f.py::T::test_b", "when": "start", "outcome": "started", "message": ""}',
        '{"test": "f.py::T::test_b", "when": "call", "outcome": "failed", "message": "KeyError: 1"}',
        '{"test": "f.py::T::test_b", "when": "teardown", "outcome": "passed", "message": ""}',
        '{"test": "f.py::T::test_session", "when": "setup", "outcome": "skipped", '
        '"message": "Skipped: Not a test."}',
        '{"test": "f.py::T::test_c", "when": "start", "outcome": "started", "message": ""}',
        '{"test": "f.py::T::test_c", "when": "setup", "outcome": "passed", "message": ""}',
        '{"test": "f.py::T::test_d", "when": "st',  # cut off by the kill
    ]
    results = suite.parse_progress("\n".join(events))
    assert results == {"test_a": suite.Outcome("passed"),
                       "test_b": suite.Outcome("failed", "KeyError: 1"),
                       "test_c": suite.Outcome("hung", "no result before the timeout")}


def test_markdown_section_is_replaced_in_place(tmp_path):
    rows = [("test_x", ["failed", "failed"], "ValueError: a | b")]
    applied = [(suite.MENDS[0], 1), (suite.MENDS[2], 0)]
    path = str(tmp_path / "suite.md")
    for code in (1, 0):
        section = suite.markdown_section("m.keras", rows, applied, "python s.py", code)
        suite.write_markdown(path, "m.keras", section)
    suite.write_markdown(path, "other", suite.markdown_section("other", [], [], "c", 0))
    text = open(path).read()
    assert text.startswith("# Horovod's Keras test suite")
    assert text.count("<!-- suite:m.keras -->") == 1 and "Launcher exit code: 0" in text
    assert "| `test_x` | failed | failed | ValueError: a \\| b |" in text
    assert "(0 matches, NOT MATCHED)" in text and "0 of 1 passed on every rank" in text
    assert text.index("suite:m.keras") < text.index("suite:other")


def test_bad_inputs_say_what_came_what_was_expected_and_the_fix(tmp_path):
    with pytest.raises(suite.BadInput, match=r"got '/no/such\.py'.*expected.*fix:"):
        suite.read_source("/no/such.py", None)
    with pytest.raises(suite.BadInput, match="expected exactly one of them"):
        suite.read_source(None, None)
    with pytest.raises(suite.BadInput, match="where git show HEAD:test/parallel.*fix:"):
        suite.read_source(None, str(tmp_path))
    with pytest.raises(suite.BadInput, match=r"got --module 'no_such_mod_q'.*"
                                             r"ModuleNotFoundError.*fix: pass --module"):
        suite.check_importable("no_such_mod_q")


def test_main_exits_2_with_one_line_on_a_missing_file(capsys):
    assert suite.main(["/no/such.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("horovod_keras_suite: got '/no/such.py'")


def test_a_missing_dependency_of_the_test_file_names_its_install(monkeypatch):
    monkeypatch.setattr(suite, "NEEDED", ("no_such_dep_z",))
    with pytest.raises(suite.BadInput, match="importing no_such_dep_z failed.*"
                                             "fix: pip install no_such_dep_z"):
        suite.check_importable("json")


def test_the_shown_command_hides_this_machines_horovod_repo():
    shown = suite.shown_command(["--horovod_repo", "/home/me/horovod/.git", "--module",
                                 "horovod.tensorflow.keras", "--markdown", "docs/x y.md"])
    assert shown == ("python scripts/horovod_keras_suite.py --horovod_repo HOROVOD_GIT_DIR "
                     "--module horovod.tensorflow.keras --markdown 'docs/x y.md'")
    assert suite.shown_command(["--horovod_repo=/srv/h"]).endswith("--horovod_repo=HOROVOD_GIT_DIR")
    assert suite.shown_command(["--keep", "/tmp/k", "--np", "2", "--keep=/tmp/j"]) == \
        "python scripts/horovod_keras_suite.py --np 2"


# A made-up file in the style of the TF core API tests, and its helper (not Horovod's text).
TF_SOURCE = """import horovod.tensorflow as hvd

_IS_TF2 = True

def test_bn(self):
    bn = tf.keras.layers.BatchNormalization(axis=1, fused=False)
    grads = {var.ref(): g for var, g in zip(model.trainable_weights, gradients)}
    self.assertEqual(hvd.size(), 2)
"""
TF_COMMON = "import os\nimport mock\n"


def test_the_tensorflow_suite_mends_its_file_and_helpers_from_a_test_tree(tmp_path):
    tf_suite = suite.SUITES["tensorflow"]
    for rel, text in ((tf_suite.test_path, TF_SOURCE), ("utils/common.py", TF_COMMON),
                      ("parallel/base_test_tensorflow.py", "import os\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    files, applied = suite.mended_files(tf_suite, str(tmp_path / tf_suite.test_path), None,
                                        "HEAD", "horovod_train.tensorflow")
    test = files[tf_suite.test_path]
    assert test.startswith("import horovod_train.tensorflow as hvd\n")
    assert "BatchNormalization(axis=1)" in test
    assert "{_variable_key(var): g for" in test and "def _variable_key(v):" in test
    assert files["utils/common.py"] == "import os\nfrom unittest import mock\n"
    assert files["parallel/base_test_tensorflow.py"] == "import os\n"
    assert {m.name: n for m, n in applied} == {
        "import-hvd": 1, "batchnorm-fused": 1, "variable-ref": 1, "variable-key-helper": 1,
        "mock-stdlib": 1}
    asserts = [ln for ln in test.splitlines() if "assert" in ln]
    assert asserts == ["    self.assertEqual(hvd.size(), 2)"]


def test_horovods_own_tensorflow_run_keeps_its_import_and_a_missing_helper_is_bad_input(
        tmp_path):
    tf_suite = suite.SUITES["tensorflow"]
    text, _ = suite.apply_mends(TF_SOURCE, "horovod.tensorflow", tf_suite.mends)
    assert text.startswith("import horovod.tensorflow as hvd\n")
    (tmp_path / "parallel").mkdir()
    (tmp_path / tf_suite.test_path).write_text(TF_SOURCE)
    with pytest.raises(suite.BadInput, match=r"base_test_tensorflow\.py.*not a file.*fix:"):
        suite.mended_files(tf_suite, str(tmp_path / tf_suite.test_path), None, "HEAD", "m")


def test_a_failure_in_one_mode_outranks_a_skip_in_the_other():
    junit = """<testsuites><testsuite><testcase classname="t.T" name="test_m">
      <skipped message="Only in eager execution mode">s</skipped>
      <failure message="ValueError: bad">f</failure></testcase></testsuite></testsuites>"""
    assert suite.parse_junit(junit)["test_m"] == suite.Outcome("failed", "ValueError: bad")


def test_sections_are_keyed_by_controller_except_gloos(tmp_path):
    path = str(tmp_path / "tf.md")
    for controller in ("gloo", "mpi", "mpi"):
        key = suite.section_key("horovod.tensorflow", controller)
        section = suite.markdown_section("horovod.tensorflow", [], [], "c", 0,
                                         controller=controller)
        suite.write_markdown(path, key, section, suite.SUITES["tensorflow"])
    text = open(path).read()
    assert text.startswith("# Horovod's TensorFlow test suite")
    assert "`test/parallel/test_tensorflow.py`" in text
    assert text.count("<!-- suite:horovod.tensorflow -->") == 1
    assert text.count("<!-- suite:horovod.tensorflow:mpi -->") == 1
    assert "## `horovod.tensorflow`, mpi (" in text


def test_a_rerun_after_a_hang_deselects_every_test_a_rank_started():
    rank0 = ('{"test": "f.py::T::test_a", "when": "start", "outcome": "started"}\n'
             '{"test": "f.py::T::test_a", "when": "call", "outcome": "passed"}\n'
             '{"test": "f.py::T::test_b", "when": "start", "outcome": "started"}\n{"te')
    rank1 = '{"test": "f.py::T::test_c", "when": "start", "outcome": "started"}\n'
    assert suite.reported_tests([rank0, rank1]) == ["f.py::T::test_a", "f.py::T::test_b",
                                                    "f.py::T::test_c"]


def test_a_test_skipped_in_one_mode_and_passed_in_the_other_reads_skipped_as_in_junit():
    events = "\n".join(
        '{"test": "f.py::T::test_g", "when": "%s", "outcome": "%s", "message": "%s"}' % e
        for e in (("start", "started", ""), ("call", "skipped", "Skipped: No GPUs available"),
                  ("call", "passed", ""), ("teardown", "passed", "")))
    assert suite.parse_progress(events)["test_g"].status == "skipped"
