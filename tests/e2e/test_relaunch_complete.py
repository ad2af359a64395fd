"""Relaunching a run that already finished (issue 17, item 16): it trains nothing,
says so, and keeps the earlier summary's figures instead of null loss and 0 samples/s."""
import json
import sys

from helpers import run_cli

TRAIN = [sys.executable, "-m", "horovod_train", "--max_steps=20", "--epochs=1",
         "--checkpoint_every=10", "--intra_op_threads=1"]


def test_a_relaunch_after_the_final_checkpoint_keeps_the_earlier_summary(tmp_path):
    args = TRAIN + [f"--checkpoint_dir={tmp_path}/ck", f"--summary_json={tmp_path}/s.json"]
    first = run_cli(args, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    earlier = json.loads((tmp_path / "s.json").read_text())
    again = run_cli(args, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already complete at step 20" in again.stderr
    kept = json.loads((tmp_path / "s.json").read_text())
    assert kept["already_complete"] is True
    assert kept["final_loss"] == earlier["final_loss"] is not None
    assert kept["samples_per_sec"] == earlier["samples_per_sec"] > 0
    assert kept["test_accuracy"] == earlier["test_accuracy"]  # same weights, same test set


def test_without_an_earlier_summary_the_figures_are_absent_not_zero(tmp_path):
    ck = f"--checkpoint_dir={tmp_path}/ck"
    assert run_cli(TRAIN + [ck], timeout=300).returncode == 0
    again = run_cli(TRAIN + [ck, f"--summary_json={tmp_path}/new.json"], timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((tmp_path / "new.json").read_text())
    assert summary["already_complete"] is True and summary["steps"] == 20
    assert summary["samples_per_sec"] is None and summary["final_loss"] is None
