"""The Horovod-examples runner's pure parts: the check every mended example passes, the
--against families, the case list and the launch argv/env builders. No TF, no ranks.
Whether the mends still match Horovod's own text is the tool's check (`--check_mends`
against a Horovod git dir, docs/testing.md): no registry serves those files to CI."""
import argparse
import importlib.util
import json
import os

import pytest

from helpers import ROOT

_spec = importlib.util.spec_from_file_location(
    "run_horovod_examples", os.path.join(ROOT, "scripts", "run_horovod_examples.py"))
examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(examples)

def args(**kw):
    base = dict(against="horovod_train.keras", full=False, mnist_epochs=4, mnist_steps=100,
                tape_mnist_steps=200, examples=",".join(examples.EXAMPLES),
                controllers="gloo,mpi,mwms")
    return argparse.Namespace(**{**base, **kw})


def test_a_mended_example_is_checked_for_what_its_mends_promise():
    """The tool checks every mended script itself (check_mended; `--check_mends` runs it
    over both families and run lengths against a Horovod git dir, no ranks): the suite
    has no Horovod git dir, so the check's rule is tested here on a stand-in text."""
    text = ("import horovod.tensorflow as hvd\n"
            "hvd.broadcast_variables(opt.variables(), root_rank=0)\n"
            "dataset.take(10000 // hvd.size())\n")
    mends = examples.mends_for("tape_mnist", args(tape_mnist_steps=60))
    mended = examples.apply_mends(text, mends)
    examples.check_mended("tape_mnist", "horovod_train.keras", mends, text, mended)
    for broken, words in ((mended.replace("horovod_train.tensorflow", "horovod.tensorflow"),
                           "no 'import horovod_train.tensorflow as hvd' line"),
                          (mended + "opt.variables()\n", "opt.variables() left"),
                          (mended + "x = 1\n", "4 changed lines for 3 mends")):
        with pytest.raises(SystemExit) as exit_:
            examples.check_mended("tape_mnist", "horovod_train.keras", mends, text, broken)
        assert exit_.value.code == 2, words


def test_the_tape_mends_are_the_import_keras3s_variables_and_the_run_length():
    mends = examples.mends_for("tape_mnist", args(tape_mnist_steps=60))
    assert [new for _, _, new in mends] == [
        "import horovod_train.tensorflow as hvd",
        "hvd.broadcast_variables(opt.variables, root_rank=0)",
        "dataset.take(60 // hvd.size())"]
    assert all(why for why, _, _ in mends)
    own = examples.mends_for("tape_synthetic", args(against="horovod.tensorflow"))
    assert [new for _, _, new in own] == ["hvd.broadcast_variables(opt.variables, root_rank=0)"]


def test_a_mend_that_does_not_match_once_is_bad_input():
    with pytest.raises(SystemExit) as exit_:
        examples.apply_mends("a\na\n", [("why", "a", "b")])
    assert exit_.value.code == 2


def test_mwms_runs_our_tape_api_only():
    run, skipped = examples.cases(args())
    assert ("tape_mnist", "mwms") in run and ("tape_synthetic", "mwms") in run
    assert ("mnist", "mwms") not in run and len(run) == 10
    assert {(e, c) for e, c, _ in skipped} == {("mnist", "mwms"), ("synthetic", "mwms")}
    run, skipped = examples.cases(args(against="horovod.tensorflow"))
    assert all(c != "mwms" for _, c in run) and len(skipped) == 4


def test_horovodrun_is_one_command_and_mwms_one_worker_a_rank_with_its_tf_config():
    [(argv, env)] = examples.launch_commands("mpi", "/w/rank_main.py", "/w/c", "/w/s.py", ["-x"])
    assert argv[1:6] == ["-np", "2", "-H", "localhost:2", "--mpi"] and env == {}
    assert argv[-4:] == ["/w/rank_main.py", "/w/c", "/w/s.py", "-x"]
    workers = examples.launch_commands("mwms", "/w/rank_main.py", "/w/c", "/w/s.py", [], 15000)
    assert [argv for argv, _ in workers] == [[examples.PY, "/w/rank_main.py", "/w/c", "/w/s.py"]] * 2
    configs = [json.loads(env["TF_CONFIG"]) for _, env in workers]
    assert configs == [{"cluster": {"worker": ["localhost:15000", "localhost:15001"]},
                        "task": {"type": "worker", "index": i}} for i in range(2)]


def test_mwms_output_is_tagged_as_horovodrun_tags_it():
    by_rank = examples.lines_by_rank("[0]<stdout>:Step #0\tLoss: 2.3\n[1]<stderr>:warn\n")
    assert by_rank == {0: ["Step #0\tLoss: 2.3"], 1: ["warn"]}


def test_a_tape_model_is_the_built_outer_uncompiled_one_once_an_optimizer_stepped(tmp_path):
    models = [dict(name="seq", built=True, inner=False, compiled=False, steps=0),
              dict(name="functional", built=True, inner=True, compiled=False, steps=0),
              dict(name="unbuilt", built=False, inner=False, compiled=False, steps=0)]
    (tmp_path / "weights-rank0.json").write_text(json.dumps(
        {"models": models, "optimizer_steps": [0, 100]}))
    found = examples.trained_models(str(tmp_path), 0, "tape")
    assert [(m["name"], m["steps"]) for m in found] == [("seq", 100)]
    assert examples.trained_models(str(tmp_path), 0, "keras") == []
    model = {"each": [["b", "f2"], ["a", "e1"]], "weights": "w"}
    assert examples.holds_final("00,e1,f2", model, "tape")
    assert not examples.holds_final("00,e1", model, "tape")
    assert examples.holds_final("w", model, "keras") and not examples.holds_final("e1,f2", model, "keras")
