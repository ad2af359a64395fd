"""A pip user's install (issue 22, part 4): the wheel, installed alone into a fresh venv
without TensorFlow, gives working console scripts: the trainer's --help, the launcher,
the planner, and one line naming the [tf] extra when training is asked for.

The wheel is built from a copy of the package sources (the checkout stays untouched:
no build/ or egg-info appear in it). Only absl, numpy and scikit-learn come from the
package index, through pip's cache."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

import horovod_train
from helpers import ROOT


SOURCES = ("horovod_train", "models", "launch", "setup.cfg", "setup.py", "pyproject.toml",
           "README.md", "LICENSE", "MANIFEST.in")


def _run(args, cwd, env=None, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL)


def _checked(args, cwd, env=None):
    proc = _run(args, cwd, env)
    assert proc.returncode == 0, f"{args}: {proc.stdout[-1500:]}{proc.stderr[-3000:]}"
    return proc


def _build_wheel(tmp) -> str:
    src, dist = os.path.join(tmp, "src"), os.path.join(tmp, "dist")
    os.mkdir(src)
    for name in SOURCES:
        origin = os.path.join(ROOT, name)
        if os.path.isdir(origin):
            shutil.copytree(origin, os.path.join(src, name),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(origin, src)
    # The build's own tools are this interpreter's: no download, no isolation venv.
    _checked([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "-w", dist, src], tmp)
    wheels = glob.glob(os.path.join(dist, "horovod_train-*.whl"))
    assert len(wheels) == 1, os.listdir(dist)
    return wheels[0]


def _user_env(venv) -> dict:
    """The shell of a user who activated the venv: nothing of this checkout's path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv
    return env


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """(bin dir, env, cwd) of a fresh venv holding the wheel and its dependencies only."""
    tmp = str(tmp_path_factory.mktemp("wheel"))
    wheel = _build_wheel(tmp)
    venv = os.path.join(tmp, "venv")
    _checked([sys.executable, "-m", "venv", venv], tmp)
    env = _user_env(venv)
    # --no-compile: byte-compiling scipy and scikit-learn would take most of the time.
    _checked([os.path.join(venv, "bin", "pip"), "install", "-q", "--no-compile", wheel], tmp, env)
    cwd = os.path.join(tmp, "elsewhere")  # not the checkout, so nothing is found by cwd
    os.mkdir(cwd)
    return os.path.join(venv, "bin"), env, cwd


def test_the_venv_holds_the_wheel_and_no_tensorflow(user):
    bin_dir, env, cwd = user
    proc = _checked([os.path.join(bin_dir, "python"), "-c",
                     "import importlib.util as u, horovod_train; print(horovod_train.__file__); "
                     "print([m for m in ('tensorflow', 'keras') if u.find_spec(m)])"], cwd, env)
    where, found = proc.stdout.split("\n")[:2]
    assert where.startswith(os.path.dirname(bin_dir)), where  # the installed copy, not ROOT
    assert found == "[]"


def test_the_wheel_carries_the_license_and_the_extras(user):
    bin_dir, env, cwd = user
    proc = _checked([os.path.join(bin_dir, "python"), "-c",
                     "import importlib.metadata as m; d = m.distribution('horovod_train'); "
                     "print(d.metadata.get_all('Provides-Extra')); "
                     "print([f for f in d.files if f.name == 'LICENSE'][0].read_text()[:200])"],
                    cwd, env)
    extras = proc.stdout.splitlines()[0]
    for extra in ("tf", "gpu", "report", "tensorboard"):
        assert f"'{extra}'" in extras, extras
    assert "Apache License" in proc.stdout and "Version 2.0, January 2004" in proc.stdout


def test_trainer_help_lists_the_flags(user):
    bin_dir, env, cwd = user
    proc = _run([os.path.join(bin_dir, "horovod-train"), "--help"], cwd, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for flag in ("--model", "--backend", "--epochs", "--batch_size", "--run_dir",
                 "--checkpoint_dir"):
        assert flag in proc.stdout, flag


def test_the_front_door_lists_every_subcommand_and_its_version(user):
    """Issue 45: `horovod_train` is installed by setup beside the older script names."""
    bin_dir, env, cwd = user
    proc = _checked([os.path.join(bin_dir, "horovod_train"), "--help"], cwd, env)
    for command in ("train", "check", "plan", "data", "report", "launch"):
        assert re.search(rf"^  {command}  +\S", proc.stdout, re.M), command
    version = _checked([os.path.join(bin_dir, "horovod_train"), "--version"], cwd, env)
    assert version.stdout == f"horovod_train {horovod_train.__version__}\n"
    typo = _run([os.path.join(bin_dir, "horovod_train"), "lanch"], cwd, env)
    assert typo.returncode == 2 and "did you mean launch" in typo.stderr


def test_launcher_help_lists_its_commands(user):
    bin_dir, env, cwd = user
    proc = _checked([os.path.join(bin_dir, "horovod-train-launch"), "--help"], cwd, env)
    for command in ("run", "print", "tf-config", "slurm", "hosts"):
        assert re.search(rf"^\s+{command}\s", proc.stdout, re.M), command


def test_planner_prints_its_tables(user):
    bin_dir, env, cwd = user
    proc = _checked([os.path.join(bin_dir, "horovod-train"), "plan", "--model", "resnet50",
                     "--gpu", "a100-40gb", "--global_batch", "256", "--nodes", "1,2",
                     "--interconnect", "ib-hdr"], cwd, env)
    assert "Memory per GPU" in proc.stdout
    # A row of the table: 1 node, 8 GPUs, the global batch of 256, then the figures.
    assert re.search(r"^\s*1\s+8\s+256\s+\d", proc.stdout, re.M), proc.stdout
    assert "Recommendation:" in proc.stdout


def test_training_without_tensorflow_names_the_extra(user):
    bin_dir, env, cwd = user
    proc = _run([os.path.join(bin_dir, "horovod-train"), "--max_steps=1"], cwd, env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "horovod_train[tf]" in lines[0], proc.stderr[-2000:]
