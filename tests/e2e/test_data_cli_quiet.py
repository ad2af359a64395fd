"""Issue 41 item 6: the data CLI and a run on converted TFRecords print only our lines:
no TensorFlow start-up lines (absl::InitializeLog, cudart_stub, oneDNN, cuInit) and no
TFRecord reader's "The default buffer size is 262144, which is overridden ..." notice."""
import re
import sys

import numpy as np

from helpers import child_env, run_cli

# A line of TensorFlow's C++ logging (`I0000 00:00:17... 6739 port.cc:153] ...`), or
# absl's and TF's start-up notices.
TF_NOISE = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]|absl::InitializeLog|"
                      r"To enable the following instructions", re.M)


def _user_env():
    """As a user's shell has it: no TF_CPP_MIN_LOG_LEVEL."""
    env = child_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


def test_convert_verify_and_a_run_print_no_tensorflow_lines(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x_train=rng.random((64, 8, 8, 1), np.float32),
             y_train=rng.integers(0, 10, 64), x_test=rng.random((32, 8, 8, 1), np.float32),
             y_test=rng.integers(0, 10, 32))
    data = tmp_path / "tfr"
    for argv in (["convert", "--input", str(tmp_path / "d.npz"), "--output_dir", str(data),
                  "--num_shards", "2", "--no_progress"],
                 ["verify", "--data_dir", str(data)]):
        proc = run_cli([sys.executable, "-m", "horovod_train.data", *argv], env=_user_env())
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not TF_NOISE.search(proc.stderr + proc.stdout), proc.stderr
    proc = run_cli([sys.executable, "-m", "horovod_train", "--dataset=tfrecord",
                    f"--data_dir={data}", "--model=digits_mlp", "--max_steps=3"],
                   env=_user_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not TF_NOISE.search(proc.stderr + proc.stdout), proc.stderr
    assert "done  |" in proc.stderr
