"""Output paths are checked on the chief before any step (issue 17, item 10): a bad
--checkpoint_dir / --run_dir / --summary_json / --export_weights is one line and exit 2
within seconds, not a traceback at the first save or after the whole run."""
import os
import subprocess
import sys

import pytest

from helpers import run_cli

TRAIN = [sys.executable, "-m", "horovod_train", "--max_steps=5", "--epochs=1",
         "--intra_op_threads=1"]


def _refused(args, fragment):
    proc = run_cli(TRAIN + args, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert fragment in lines[-1] and "Fix:" in lines[-1], lines[-1]
    assert "Traceback" not in proc.stderr
    assert "train | step" not in proc.stderr  # refused before any step
    return lines[-1]


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "plain-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize("flag", ["--checkpoint_dir", "--run_dir"])
def test_a_directory_under_dev_null_is_refused(flag):
    _refused([f"{flag}=/dev/null/ck"], f"{flag}: received '/dev/null/ck'")


@pytest.mark.parametrize("flag", ["--checkpoint_dir", "--run_dir"])
def test_a_regular_file_as_a_directory_is_refused(flag, a_file):
    _refused([f"{flag}={a_file}"], f"{flag}: received '{a_file}'")


def test_a_directory_below_a_regular_file_is_refused(a_file):
    _refused([f"--run_dir={a_file}/run"], "--run_dir")


def test_summary_json_below_a_regular_file_is_refused():
    _refused(["--summary_json=/etc/hostname/s.json"], "--summary_json: received '/etc/hostname/s.json'")


def test_export_weights_that_is_a_directory_is_refused(tmp_path):
    _refused([f"--export_weights={tmp_path}"], "--export_weights")


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only bind mount (root ignores permission bits, so chmod would not do)."""
    target = tmp_path / "ro"
    target.mkdir()
    if os.geteuid() != 0:
        os.chmod(target, 0o555)
        yield target
        os.chmod(target, 0o755)
        return
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(target), str(target)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {mounted.stderr.strip()}")
    # Older mount(8) ignores ro on the first bind: remount to be sure.
    subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], capture_output=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], capture_output=True)


def test_a_read_only_mount_is_refused(read_only_dir):
    _refused([f"--checkpoint_dir={read_only_dir}/ck"], "--checkpoint_dir")


def test_good_paths_are_created_and_the_run_trains(tmp_path):
    proc = run_cli(TRAIN + [f"--checkpoint_dir={tmp_path}/a/ck", f"--run_dir={tmp_path}/b/run",
                            f"--summary_json={tmp_path}/c/s.json"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "c" / "s.json").is_file()
    assert not [n for n in os.listdir(tmp_path / "a" / "ck") if n.startswith(".write-probe")]
