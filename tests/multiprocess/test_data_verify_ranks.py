"""Issue 41 item 2 on real ranks: the TFRecord files are verified once, split across 2
ranks (each scans half), remembered for the relaunch (which scans none), and damage
found by either rank is refused by both before step 1."""
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT, run_cli
from ranks import horovodrun

pytestmark = pytest.mark.slow
FLAGS = ["--model=digits_mlp", "--max_steps=10", "--log_every=5", "--eval_every_epochs=0"]


@pytest.fixture
def tfrecords(tmp_path):
    from horovod_train.data import sources
    d = sources.load_digits(None)
    np.savez(tmp_path / "digits.npz", x_train=d.x_train, y_train=d.y_train, x_test=d.x_test,
             y_test=d.y_test)
    out = tmp_path / "tfrecord"
    subprocess.run([sys.executable, "-m", "horovod_train.data", "convert",
                    f"--input={tmp_path / 'digits.npz'}", f"--output_dir={out}",
                    "--num_shards=4", "--no_progress"], check=True, cwd=ROOT, capture_output=True)
    return out


def test_files_are_verified_once_across_ranks_and_remembered(tfrecords):
    pytest.importorskip("horovod.tensorflow")
    argv = horovodrun(2, "gloo", FLAGS + ["--dataset=tfrecord", f"--data_dir={tfrecords}"])
    first = run_cli(argv, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    # 4 train and 4 test files: each rank scanned 4, the chief says so.
    assert re.search(r"data \| verified 4 of 4 files \(2 across 2 ranks\), 0 remembered",
                     first.stderr), first.stderr[-3000:]
    assert len(re.findall(r"data \| verified", first.stderr)) == 2  # the two splits, chief only
    again = run_cli(argv, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "data | verified" not in again.stderr  # all remembered: nothing scanned

    shard = sorted(tfrecords.glob("train-*.tfrecord"))[1]
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    shard.write_bytes(bytes(data))
    damaged = run_cli(argv, timeout=300)
    assert damaged.returncode != 0
    refusals = re.findall(rf"\[(\d)\]<stderr>:horovod_train: error: TFRecord file \S*{shard.name}: "
                          r"received 'an unreadable record", damaged.stderr)
    assert sorted(set(refusals)) == ["0", "1"], damaged.stderr[-3000:]  # both ranks refuse
    assert "step 1" not in damaged.stderr and "train |" not in damaged.stderr
