"""devices.pin_gpu against real TensorFlow, and MWMS's collective choice in its setup.

This host has no GPU, so TF lists none: what runs here is the CPU path (nothing
pinned, TF's devices not created early) and RING for --collective=auto. The GPU
rule itself is unit-tested in tests/unit/test_devices.py. Each check runs in a fresh
process: TF's device setup can happen only once per process."""
import json
import sys


from helpers import child_env, run_cli
from ranks import TRAIN, free_ports, tf_config


PIN = """
import json
import tensorflow as tf
from tensorflow.python.eager import context
from horovod_train import devices
gpus = tf.config.list_physical_devices("GPU")
before = [d.name for d in tf.config.get_visible_devices()]
choice = devices.pin_gpu(0, 1, environ={})
print(json.dumps({"gpus": len(gpus), "index": choice.index, "before": before,
                  "after": [d.name for d in tf.config.get_visible_devices()],
                  "growth": [tf.config.experimental.get_memory_growth(g) for g in gpus],
                  "created": context.context()._context_handle is not None}))
"""

MWMS = """
import json, sys
import tensorflow as tf
from horovod_train.backends.mwms import MwmsBackend
backend = MwmsBackend(collective=sys.argv[1])
backend.setup()
print(json.dumps({"collective": backend.collective, "uses_gpu": backend.gpu.uses_gpu,
                  "implementation": backend.strategy.extended._communication_options
                  .implementation.name}))
"""


def _json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pin_gpu_follows_what_tf_lists_and_creates_no_device():
    out = _json(run_cli([sys.executable, "-c", PIN], timeout=300))
    assert out["created"] is False  # pinning must leave TF free to configure later
    if out["gpus"] == 0:  # this host: nothing to pin, TF's view unchanged
        assert out["index"] is None and out["after"] == out["before"]
    else:  # a GPU host: only GPU 0 visible, with memory growth
        assert out["index"] == 0 and out["growth"][0] is True
        assert [n for n in out["after"] if "GPU" in n] == ["/physical_device:GPU:0"]


def test_mwms_auto_collective_follows_the_gpus():
    port = free_ports(1)
    out = _json(run_cli([sys.executable, "-c", MWMS, "auto"], timeout=300,
                        env=child_env(TF_CONFIG=tf_config(port, 0))))
    expected = "nccl" if out["uses_gpu"] else "ring"
    assert out["collective"] == expected and out["implementation"] == expected.upper()


def test_cli_nccl_without_a_gpu_exits_2_with_one_line():
    port = free_ports(1)
    proc = run_cli(TRAIN + ["--backend=mwms", "--collective=nccl", "--epochs=1"], timeout=300,
                   env=child_env(TF_CONFIG=tf_config(port, 0), CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines()
             if line.startswith("horovod_train: error:")]
    assert len(lines) == 1 and "received 'nccl' with no GPU" in lines[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
