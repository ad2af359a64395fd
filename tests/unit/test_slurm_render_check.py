"""Issue 45 item 3, at render time: `python -m launch slurm` checks the training command
with the trainer's own flags (`horovod_train check`, a real subprocess) and refuses a bad
one before any script exists; the script asks Slurm for an early SIGTERM, N seconds
before its time limit, from --stop_grace_s and the checkpoint's size."""
import re

import pytest

from launch import contract, sbatch, trainer_check
from launch.__main__ import main as launch_main
from launch.errors import LaunchError

TRAINER = ["python", "-m", "horovod_train"]


def render(tmp_path, *train_flags, command=TRAINER):
    out = tmp_path / "job.sbatch"
    code = launch_main(["slurm", "--nodes", "1", "--time", "00:10:00", "-o", str(out), "--",
                        *command, *train_flags])
    return code, out


@pytest.mark.parametrize("flag, fragment", [
    ("--modle=resnet50", "--modle: received an unknown flag; expected a flag that "
     "`horovod_train train --help` lists. Fix: did you mean --model?"),
    ("--batch_size=0", "--batch_size: received 0; expected a finite positive number"),
    ("--backend=horovd", "Fix: did you mean --backend=horovod?"),
])
def test_a_bad_training_command_is_refused_before_any_script(tmp_path, capsys, flag, fragment):
    code, out = render(tmp_path, flag)
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.startswith("python -m launch: error: the training command after '--': ")
    assert fragment in err and err.count("\n") == 1, err


def test_the_front_door_and_train_spellings_are_checked_too(tmp_path, capsys):
    for command in (["horovod_train", "train"], ["horovod_train"], ["/opt/venv/bin/python3",
                                                                   "-m", "horovod_train"]):
        code, out = render(tmp_path, "--modle=x", command=command)
        assert code == 2 and "did you mean --model?" in capsys.readouterr().err, command


def test_a_good_command_gets_the_early_signal_from_its_stop_grace(tmp_path, capsys):
    # --data_dir may exist on the compute nodes only: not checked on the login node.
    code, out = render(tmp_path, "--model=digits_cnn", "--stop_grace_s=20",
                       "--dataset=tfrecord", "--data_dir=/nowhere/on/this/host")
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert re.findall(r"^#SBATCH --signal=(\S+)$", text, re.M) == ["TERM@35"]
    assert "# Early signal: Slurm sends SIGTERM to every rank 35 s before --time ends" in text
    assert "--stop_grace_s (20 s)" in text and "warning" not in text
    # The #SBATCH lines come before any command, or sbatch ignores them.
    assert text.index("#SBATCH --signal") < text.index("set -euo pipefail")


def test_defaults_and_a_checkpoint_longer_than_the_grace(tmp_path):
    code, out = render(tmp_path)
    assert code == 0 and "#SBATCH --signal=TERM@75\n" in out.read_text()  # 60 s + 15 s
    code, out = render(tmp_path, "--model=decoder_lm_124m", "--stop_grace_s=5")
    text = out.read_text()
    # GPT-2 small with adam: 124 M params x 4 bytes x 3 = 1.5 GB, 15 s at 100 MB/s.
    assert code == 0 and "#SBATCH --signal=TERM@30\n" in text
    assert "# warning: --stop_grace_s 5 is shorter than that write" in text


def test_another_program_is_written_unchecked_and_says_so(tmp_path):
    code, out = render(tmp_path, "--anything", command=["python", "my_train.py"])
    text = out.read_text()
    assert code == 0 and "#SBATCH --signal=TERM@75\n" in text
    assert "not horovod_train's trainer: not checked" in text


@pytest.mark.parametrize("command, flags", [
    (["python", "-m", "horovod_train", "--a=1"], ["--a=1"]),
    (["python3.11", "-m", "horovod_train", "train", "--a=1"], ["--a=1"]),
    (["horovod_train", "--a=1"], ["--a=1"]),
    (["horovod-train", "train"], []),
    (["python", "-m", "horovod_train"], []),
    (["horovod_train", "plan", "--model", "x"], None),
    (["python", "-m", "horovod_train.report", "d"], None),
    (["python", "train.py", "-m", "horovod_train"], None),
])
def test_which_commands_are_the_trainer(command, flags):
    assert trainer_check.trainer_flags(command) == flags


def test_signal_seconds_and_a_check_that_cannot_run():
    assert sbatch.signal_seconds(contract.DEFAULT_STOP_GRACE_S, None) == 75
    assert sbatch.signal_seconds(10, int(2e9)) == 35  # 20 s of writing wins over 10 s
    assert sbatch.signal_seconds(1e9, None) == sbatch.MAX_SIGNAL_S
    with pytest.raises(LaunchError, match="horovod_train importable by this Python"):
        trainer_check.read_answer(1, "", "ModuleNotFoundError: No module named 'absl'")


@pytest.mark.parametrize("text, seconds", [
    ("90", 5400), ("2:30", 150), ("01:02:03", 3723), ("1-02", 93600), ("1-02:03", 93780),
    ("1-02:03:04", 93784)])
def test_slurm_time_in_seconds(text, seconds):
    assert sbatch.time_seconds(text) == seconds


def test_a_time_limit_shorter_than_the_early_signal_is_refused(tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    code = launch_main(["slurm", "--nodes", "1", "--time", "1", "-o", str(out), "--",
                        *TRAINER])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.startswith("python -m launch: error: --time: received '1'; expected more than "
                          "the 75 s before its end"), err
    code = launch_main(["slurm", "--nodes", "1", "--time", "1", "-o", str(out), "--", *TRAINER,
                        "--stop_grace_s=20"])
    assert code == 0 and "#SBATCH --signal=TERM@35\n" in out.read_text()
