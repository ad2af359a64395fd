"""Issue 17 ("Nothing lost, nothing hangs"), the training CLI: bad launch input that
used to hang or print a traceback now ends in seconds with one line and exit 2."""
import json
import sys
import time

import pytest

from helpers import child_env, run_cli

TRAIN = [sys.executable, "-m", "horovod_train", "--max_steps=1"]


def assert_one_usage_line(proc, *fragments):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert lines and lines[-1].startswith("horovod_train: error: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[-1]


def test_tf_config_listing_one_address_twice_exits_2_within_seconds():
    """Item 3: the worker met itself in the rendezvous and MWMS waited forever."""
    twice = json.dumps({"cluster": {"worker": ["localhost:23456", "localhost:23456"]},
                        "task": {"type": "worker", "index": 0}})
    start = time.monotonic()
    proc = run_cli(TRAIN, timeout=120, env=child_env(TF_CONFIG=twice))
    elapsed = time.monotonic() - start
    assert_one_usage_line(proc, "'localhost:23456'", "workers 0 and 1")
    assert elapsed < 60, elapsed  # TensorFlow's import, then the check; never the hang


@pytest.mark.parametrize("name, value", [("HOROVOD_RANK", "abc"),
                                         ("OMPI_COMM_WORLD_RANK", "-1")])
def test_malformed_rank_variable_exits_2_naming_it(name, value):
    """Item 14: a bare ValueError traceback (exit 1) before."""
    proc = run_cli(TRAIN, timeout=120, env=child_env(**{name: value}))
    assert_one_usage_line(proc, f"environment variable {name}: received {value!r}",
                          "expected a non-negative integer", "Fix: ")
