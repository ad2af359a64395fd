"""A checkpoint whose meta.json holds a value out of range (issue 55, item 2), through the
CLI: one line naming the field, the value, the range and the fix, and exit 2, before any
step. Before, a huge epoch ended in exit 0, nothing trained, and "the run was already
complete at step 30 of -43999560".

One one-process launch, refused before training (about 10 s: TensorFlow's import). The
record is refused on its own, before the state is read, so the checkpoint's arrays need
not be the model's: numpy arrays stand in."""
import sys

import numpy as np

from checkpoint_edit import recommit
from helpers import run_cli
from horovod_train import checkpoint
from horovod_train import config as cfg


def test_a_huge_epoch_in_meta_json_is_one_line_and_exit_2(tmp_path):
    record = {"lr_schedule": {"scale": 1.0, "warmup_steps": 0},
              "position": {"epoch": 0, "epoch_examples": 320, "layouts": [[1, 32, 320]]}}
    path = checkpoint.save(str(tmp_path / "ck"), 10, [np.zeros(3, np.float32)],
                           cfg.RunConfig(), keep=1, facts={"world_size": 1}, record=record)
    recommit(path, lambda meta: meta["position"].update(epoch=10 ** 9))
    proc = run_cli([sys.executable, "-m", "horovod_train", "--backend=local", "--max_steps=20",
                    "--intra_op_threads=1", f"--checkpoint_dir={tmp_path}/ck"], timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "field position.epoch:" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "received 1000000000; expected an integer from 0 to 10" in lines[0]
    assert f"Fix: move {path} aside" in lines[0]
    assert "already complete" not in proc.stderr and "| step" not in proc.stderr
