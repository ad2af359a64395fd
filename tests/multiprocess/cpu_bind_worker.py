"""One rank of test_cpu_binding.py: joins the job as a Keras user does (htk.Strategy,
which binds the rank before Horovod starts its threads), runs an allreduce so that
Horovod's and Gloo's threads exist, then writes OUT/rank<r>.json with this process's
mask, every thread's mask and the strategy's account of it.

  horovodrun -np 2 -H localhost:2 --gloo python cpu_bind_worker.py OUT
"""
import json
import os
import sys

import tensorflow as tf

import horovod_train.keras as htk


def thread_masks() -> dict:
    """tid -> the CPUs the kernel lets that thread of this process run on."""
    return {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}


def main(out: str) -> None:
    strategy = htk.Strategy(backend="horovod")
    import horovod.tensorflow as hvd
    total = float(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy()[0])
    result = {"rank": strategy.rank, "local_rank": strategy.local_rank, "sum": total,
              "mask": sorted(os.sched_getaffinity(0)), "threads": thread_masks(),
              "said": strategy.cpus}
    with open(os.path.join(out, f"rank{strategy.rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
