"""A disk that fills during a real run: one line naming the path, exit 2, no traceback
(issue 17, item 10). The disk is a real 64 KiB tmpfs (root only, as CI runs)."""
import os
import sys

import pytest

from helpers import run_cli
from unit.test_hostile_disk import fill, tiny_tmpfs

TRAIN = [sys.executable, "-m", "horovod_train", "--backend=local", "--epochs=1",
         "--intra_op_threads=1", "--eval_every_epochs=0", "--baseline_cache="]


def _one_error_line(proc, starts_with):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("horovod_train: error")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"horovod_train: error: {starts_with}"), lines[0]
    assert "(No space left on device)" in lines[0] and "Fix: " in lines[0], lines[0]
    return lines[0]


def test_run_dir_filling_mid_run(tmp_path):
    # Every step's record is ~1 KB: 64 KiB fill after some tens of intervals, mid-run.
    with tiny_tmpfs(tmp_path / "full") as mnt:
        run_dir = os.path.join(mnt, "run")
        proc = run_cli(TRAIN + ["--max_steps=200", "--log_every=1", f"--run_dir={run_dir}"],
                       timeout=300)
        line = _one_error_line(proc, f"--run_dir: cannot write {run_dir}/")
        assert "train | step 2/" in proc.stderr  # it did fill mid-run, not at start-up
        assert "--checkpoint_dir is untouched" in line


@pytest.mark.parametrize("flag, name", [("--summary_json", "summary.json"),
                                        ("--export_weights", "weights.npz")])
def test_final_writes_on_a_full_disk(tmp_path, flag, name):
    with tiny_tmpfs(tmp_path / "full") as mnt:
        fill(mnt)
        path = os.path.join(mnt, name)
        proc = run_cli(TRAIN + ["--max_steps=5", f"{flag}={path}"], timeout=300)
        _one_error_line(proc, f"{flag}: cannot write {path} ")
        assert sorted(os.listdir(mnt)) == ["ballast"]  # no partial file left behind
