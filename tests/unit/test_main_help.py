"""`python -m horovod_train --help` lists our flags by heading and exits 0 without
TensorFlow; a missing TensorFlow or Keras is one line with the fix (exit 2); dashes and
underscores in flag names are alike (issue 22)."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from absl import flags

from horovod_train import flags as ht_flags

REPO = Path(__file__).resolve().parents[2]
HEADINGS = ("model", "data", "speed", "launch", "observe", "faults")
# Runs the trainer's entry point with `blocked` modules unimportable (as if not installed),
# then reports which heavy modules the run imported.
PROBE = """
import sys
blocked = {blocked!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
sys.argv = {argv!r}
import atexit
atexit.register(lambda: sys.stderr.write("HEAVY " + " ".join(sorted(
    m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "horovod"))) + "\\n"))
from horovod_train.__main__ import run_main
run_main()
"""


def trainer(*args, blocked=(), prog="horovod_train"):
    code = PROBE.format(blocked=tuple(blocked), argv=[prog, *args])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


def heavy(result) -> list[str]:
    lines = [line for line in result.stderr.splitlines() if line.startswith("HEAVY")]
    return lines[-1].split()[1:] if lines else ["<no report>"]


def field_names():
    return [field.name for _, field in ht_flags.option_fields()]


@pytest.mark.parametrize("word", ["--help", "--helpshort", "-h", "-help", "-?"])
def test_help_lists_our_flags_by_heading_and_exits_0_without_tensorflow(word):
    started = time.monotonic()
    result = trainer(word)
    assert result.returncode == 0, result.stderr
    assert heavy(result) == []
    assert time.monotonic() - started < 30  # generous for a loaded CI box; TF takes longer
    text = result.stdout
    at = [text.index(f"\n{heading}: ") for heading in HEADINGS]
    assert at == sorted(at), "headings out of order"
    for name in field_names():
        assert f"--{name} (default: " in text or f"--[no]{name} (default: " in text, name
    assert "--model (default: digits_cnn)" in text and "resnet50" in text
    assert "--[no]scale_lr (default: true)" in text
    assert "--verbosity" not in text  # absl's own wait for --helpfull


def test_each_flag_sits_under_its_own_heading():
    text = trainer("--help").stdout
    sections = {}
    for chunk in text.split("\n\n"):
        head = chunk.split(":", 1)[0]
        if head in HEADINGS:
            sections[head] = chunk
    assert "--backend (default: auto)" in sections["launch"]
    assert "--batch_size (default: 32)" in sections["data"]
    assert "--checkpoint_dir (default: not set)" in sections["faults"]
    assert "--precision (default: fp32)" in sections["speed"]
    assert "--run_dir (default: not set)" in sections["observe"]
    assert "one of: fp32, mixed_float16, mixed_bfloat16" in sections["speed"]


def test_helpfull_adds_absls_flags_after_ours():
    result = trainer("--helpfull")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.index("\nmodel: ") < text.index("absl's own flags:") < text.index("--verbosity")
    assert "--flagfile" in text and "--[no]logtostderr" in text
    assert heavy(result) == []


def test_the_console_script_helps_too():
    result = trainer("--help", prog="horovod-train")
    assert result.returncode == 0 and "\nfaults: " in result.stdout
    script = shutil.which("horovod-train", path=os.path.dirname(sys.executable))
    if script is not None:  # installed (pip install -e .): the real entry point
        real = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
        assert real.returncode == 0 and real.stdout == result.stdout


EXPECTED_TF = ("horovod_train: error: TensorFlow is not installed (No module named "
               "'tensorflow'). Fix: pip install 'horovod_train[tf]' (or make setup)")


EXPECTED_KERAS = ("horovod_train: error: Keras is not installed (No module named 'keras'). "
                  "Fix: pip install 'horovod_train[tf]' (or make setup)")


@pytest.mark.parametrize("blocked, expected", [
    (("tensorflow",), {EXPECTED_TF}),  # Keras 3 imports its TF backend: that one is named
    (("keras",), {EXPECTED_KERAS}),
    (("tensorflow", "keras"), {EXPECTED_TF, EXPECTED_KERAS}),  # whichever is imported first
])
def test_training_without_tensorflow_is_one_line_with_the_fix(blocked, expected):
    result = trainer("--max_steps=1", blocked=blocked)
    assert result.returncode == 2, result.stderr
    lines = [text for text in result.stderr.splitlines() if not text.startswith("HEAVY")]
    assert len(lines) == 1 and lines[0] in expected, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"]])
def test_help_and_plan_work_without_tensorflow(args):
    result = trainer(*args, blocked=("tensorflow", "keras"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


# ---- one vocabulary: dashes and underscores -------------------------------------------

@pytest.fixture
def parse(monkeypatch):
    """__main__._parse over a private FlagValues holding the generated flags."""
    from horovod_train import __main__ as main
    fv = flags.FlagValues()
    ht_flags.define_flags(fv)
    monkeypatch.setattr(main, "FLAGS", fv)
    return lambda *args: (main._parse(["horovod_train", *args]), fv)[1]


def test_dashed_names_are_the_underscored_flags(parse):
    fv = parse("--batch-size=64", "--fusion-threshold-mb", "8", "--run-dir=/tmp/my-run")
    assert fv.batch_size == 64 and fv.fusion_threshold_mb == 8.0
    assert fv.run_dir == "/tmp/my-run"  # values keep their dashes


@pytest.mark.parametrize("word", ["--noinstrument", "--no-instrument", "--no_instrument"])
def test_a_boolean_is_switched_off_in_every_spelling(parse, word):
    assert parse(word).instrument is False


def test_a_bad_value_names_the_flag_and_help(parse, capsys):
    with pytest.raises(SystemExit) as code:
        parse("--batch-size=abc")
    assert code.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("horovod_train: error: --batch_size: received 'abc' (")
    assert "; expected a value of type int" in err
    assert err.endswith("Fix: see `horovod_train train --help`") and "\n" not in err
