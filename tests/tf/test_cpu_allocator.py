"""On a CPU host our program asks TensorFlow for its pooling (BFC) CPU allocator; the
user's own TF_CPU_ALLOCATOR_USE_BFC wins. Each case runs in a fresh interpreter, since TF
reads the variable once, when its first op creates the CPU allocator. Whether the pool
is in force is TF's own answer: the log line process_state.cc writes when it makes the
CPU allocator a BFCAllocator. (Memory stats for CPU:0 are no answer: on some hosts TF
keeps them for its default allocator too.)"""
import json
import os
import subprocess
import sys

PROBE = """
import json, os
from horovod_train import runtime
chosen = runtime.choose_cpu_allocator()
import tensorflow as tf
x = tf.ones([1 << 20]) * 2.0
print(json.dumps({"chosen": chosen, "seen": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC")}))
"""
POOL_LINE = "Using BFCAllocator with memory limit of"  # TF's VLOG(2) in process_state.cc


def _probe(**env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    environ.update(env, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="process_state=2")
    proc = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True,
                          text=True, timeout=300, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(got, pooled=POOL_LINE in proc.stderr)


def test_a_cpu_host_gets_tfs_pooling_allocator():
    got = _probe(CUDA_VISIBLE_DEVICES="-1")
    assert got == {"chosen": {"TF_CPU_ALLOCATOR_USE_BFC": "true"}, "pooled": True,
                   "seen": "true"}


def test_the_users_own_setting_wins():
    got = _probe(CUDA_VISIBLE_DEVICES="-1", TF_CPU_ALLOCATOR_USE_BFC="false")
    assert got == {"chosen": {}, "pooled": False, "seen": "false"}


def test_a_gpu_host_keeps_tfs_default():
    from horovod_train import runtime
    assert runtime.choose_cpu_allocator(environ={}, gpus=1) == {}
    assert runtime.choose_cpu_allocator(environ={}, gpus=0) == \
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
