"""Issue 45 item 1: one command, `horovod_train train|plan|data|report|launch`, with
--version, one error format for every tool (received / expected / Fix, one line, exit 2)
and "did you mean" for flags, subcommands and choice values."""
import configparser
import os
import re
import subprocess
import sys

import pytest

import horovod_train
from horovod_train import commands
from helpers import ROOT, log_filters_kept

# PROG: error: WHAT: received X (or: not given); expected Y. Fix: Z  -- on one line.
ONE_LINE = re.compile(r"^(?P<prog>horovod_train(?: \w+)?): error: \S[^\n]*: "
                      r"(received [^\n]+|not given); expected [^\n]+\. Fix: [^\n]+\n$")


def front(*argv, capsys):
    with log_filters_kept():  # commands.run installs its log filters for good
        code = commands.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_is_the_packages_and_setup_reads_it_from_there(capsys):
    code, out, _ = front("--version", capsys=capsys)
    assert code == 0 and out == f"horovod_train {horovod_train.__version__}\n"
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    assert cfg["metadata"]["version"] == "attr: horovod_train.__version__"


def test_the_console_script_is_installed_by_setup_beside_the_old_names():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    scripts = dict(line.split(" = ") for line in
                   cfg["options.entry_points"]["console_scripts"].strip().splitlines())
    assert scripts["horovod_train"] == "horovod_train.commands:main"
    assert scripts["horovod-train"] == "horovod_train.commands:main"
    assert scripts["horovod-train-launch"] == "launch.__main__:main"


def test_help_lists_every_subcommand_on_one_line_each(capsys):
    code, out, _ = front("--help", capsys=capsys)
    assert code == 0
    listed = re.findall(r"^  (\w+)  +(\S.*)$", out.split("train flags:")[0], re.M)
    assert [name for name, _ in listed] == ["train", "check", "plan", "data", "report", "launch"]
    assert all(len(summary) > 20 for _, summary in listed)
    assert "\nmodel: " in out  # then the trainer's flags, as `python -m horovod_train --help`


@pytest.mark.parametrize("argv, prog, fragment", [
    (["trian"], "horovod_train", "Fix: did you mean train? Else see `horovod_train --help`"),
    (["lanch", "slurm"], "horovod_train", "Fix: did you mean launch"),
    (["plan", "--modle", "x"], "horovod_train plan", "Fix: did you mean --model"),
    (["plan", "--model", "resnet50", "--gpu", "a100-40gb", "--global_batch", "64",
      "--objective", "fastst"], "horovod_train plan", "did you mean --objective fastest?"),
    (["data", "conv"], "horovod_train data", "Fix: did you mean convert?"),
    (["data", "verify", "--data", "d"], "horovod_train data", "did you mean --data_dir?"),
    (["report", "--no_plot", "x"], "horovod_train report", "did you mean --no_plots?"),
    (["report"], "horovod_train report", "RUN_DIR: not given"),
    (["launch", "slrum"], "horovod_train launch", "Fix: did you mean slurm?"),
    (["launch", "slurm", "--nodse", "1", "--", "python", "-m", "horovod_train"],
     "horovod_train launch", "did you mean --nodes?"),
    (["launch", "print", "--backend", "mwm", "-np", "2", "--", "python", "-m", "horovod_train"],
     "horovod_train launch", "did you mean --backend mwms?"),
])
def test_every_tool_fails_in_one_format_with_did_you_mean(argv, prog, fragment, capsys):
    code, out, err = front(*argv, capsys=capsys)
    assert code == 2 and out == ""
    line = ONE_LINE.match(err)
    assert line, err
    assert line["prog"] == prog and fragment in err


def _trainer(*argv):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "horovod_train", *argv], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


@pytest.mark.parametrize("argv, fragment", [
    (["train", "--modle=mlp"], "--modle: received an unknown flag; expected a flag that "
     "`horovod_train train --help` lists. Fix: did you mean --model?"),
    (["--backend=horovd"], "--backend: received 'horovd'; expected one of: auto, horovod, "
     "local, mwms. Fix: did you mean --backend=horovod?"),
    (["train", "--batch_size=0"], "--batch_size: received 0; expected a finite positive"),
])
def test_the_trainer_speaks_the_same_format_in_both_spellings(argv, fragment):
    result = _trainer(*argv)
    assert result.returncode == 2, result.stderr
    assert ONE_LINE.match(result.stderr) and fragment in result.stderr, result.stderr


def test_python_dash_m_forms_keep_working(capsys):
    from horovod_train.plan.cli import main as plan_main
    from launch.__main__ import main as launch_main
    assert plan_main(["--modle", "x"]) == 2
    assert capsys.readouterr().err.startswith("horovod_train plan: error: --modle:")
    assert launch_main(["slrum"]) == 2
    assert capsys.readouterr().err.startswith("python -m launch: error: subcommand: received")
    code, out, _ = front("launch", "nodelist", "n[1-2]", capsys=capsys)
    assert code == 0 and out == "n1\nn2\n"
