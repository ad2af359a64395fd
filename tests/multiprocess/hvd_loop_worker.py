"""One rank of the Horovod background-loop checks (test_horovod_loop.py).

  reinit N OUT  - N rounds of hvd.init(), one allreduce, hvd.shutdown() in one job; rank 1
                  starts each round late, so rank 0 waits in every rendezvous
  latency N OUT - N back-to-back allreduces of 4 KiB after a warm-up; seconds of each

Each rank writes OUT/rank<r>.json when it is done, so a rank that hung leaves no file.
"""
import json
import os
import sys
import time

import tensorflow as tf
import horovod.tensorflow as hvd


def reinit(rounds: int) -> dict:
    sums = []
    for _ in range(rounds):
        hvd.init()
        rank = hvd.rank()
        sums.append(float(hvd.allreduce(tf.constant([rank + 1.0]), op=hvd.Sum).numpy()[0]))
        hvd.shutdown()
        if rank == 1:
            time.sleep(0.3)  # the late rank is the one that used to read stale addresses
    return {"rank": rank, "sums": sums}


def latency(calls: int) -> dict:
    hvd.init()
    x = tf.ones([1024], tf.float32)  # 4 KiB
    for _ in range(2):
        hvd.allreduce(x, op=hvd.Sum).numpy()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        hvd.allreduce(x, op=hvd.Sum).numpy()
        seconds.append(time.perf_counter() - start)
    return {"rank": hvd.rank(), "seconds": seconds}


def main(mode: str, n: str, out: str) -> None:
    result = {"reinit": reinit, "latency": latency}[mode](int(n))
    with open(os.path.join(out, f"rank{result['rank']}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
