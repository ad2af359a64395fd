"""Runs inside every rank for bench/small_allreduce.py: every Horovod configuration.

  horovodrun -np 2 -H localhost:2 --gloo python bench/small_allreduce_worker.py \
      --configs 5:default,0.1:0 --rounds 2 --out runs/bench/small.json

Bare Horovod (not our backend), so the settings under test are the only ones in force.
HOROVOD_CYCLE_TIME and HOROVOD_CACHE_CAPACITY are read once, when the background thread
starts, so each configuration is its own hvd.init() ... hvd.shutdown(); rounds cycle
through all configurations, so machine noise hits every one alike. Under MPI, mpi4py
initialises MPI first: Horovod then leaves it running at shutdown (it finalises only
an MPI it started), and the next init reuses it.

Per configuration and size: the latency of single `hvd.allreduce` calls, eager and in a
tf.function, timed one call at a time (the collective lines the ranks up), and under MPI
mpi4py's Allreduce of the same buffer. Then the CPU seconds (user + system, getrusage)
this process spends per wall second while it sleeps between allreduces: Horovod's
background thread and its transport alone, the load a short cycle puts on a neighbour
rank's core. Rank 0 writes one JSON file with both ranks' figures.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="0.1:0,0.1:default,1:0,1:default,5:0,5:default",
                   help="cycle_ms:cache_capacity pairs ('default': Horovod's own)")
    p.add_argument("--sizes", default="4096,65536,1048576", help="bytes, float32")
    p.add_argument("--iters", type=int, default=30, help="timed calls per size and mode")
    p.add_argument("--rounds", type=int, default=2, help="passes over all configurations")
    p.add_argument("--idle_s", type=float, default=1.0, help="sleep measured for idle CPU")
    p.add_argument("--mpi", action="store_true", help="MPI controller: mpi4py owns MPI")
    p.add_argument("--bind", action="store_true", help="bind this rank to its share of the "
                   "cores first, by our program's rule (horovod_train/cpus.py)")
    p.add_argument("--out", required=True, help="rank 0 writes the JSON here")
    return p.parse_args(argv)


def latencies(call, iters: int) -> list:
    """Seconds of each of `iters` calls, after two warm-ups (tracing, the first
    negotiation that fills the response cache)."""
    call()
    call()
    out = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def idle_cpu(hvd, tf, seconds: float) -> float:
    """CPU seconds per wall second while this rank sleeps right after an allreduce;
    the TF op pool is idle, so what burns is Horovod's cycle (and its transport)."""
    hvd.allreduce(tf.ones([1]), name="idle_sync").numpy()
    cpu, wall = common.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (common.cpu_seconds() - cpu) / (time.perf_counter() - wall)


def apply_config(cycle_ms: str, cache: str) -> None:
    os.environ["HOROVOD_CYCLE_TIME"] = cycle_ms
    if cache == "default":
        os.environ.pop("HOROVOD_CACHE_CAPACITY", None)
    else:
        os.environ["HOROVOD_CACHE_CAPACITY"] = cache


def measure_one(hvd, tf, comm, sizes, args) -> dict:
    rows = []
    for size in sizes:
        x = tf.ones([size // 4], tf.float32)
        # Fixed names: the response cache keys on them, as on a training step's ops.
        graph_fn = tf.function(lambda t, s=size: hvd.allreduce(t, op=hvd.Sum, name=f"g{s}"))
        row = {"bytes": size,
               "eager_s": latencies(lambda: hvd.allreduce(x, op=hvd.Sum, name=f"e{size}")
                                    [:1].numpy(), args.iters),
               "graph_s": latencies(lambda: graph_fn(x)[:1].numpy(), args.iters)}
        if comm is not None:
            import numpy as np
            from mpi4py import MPI
            buf, out = np.ones(size // 4, np.float32), np.empty(size // 4, np.float32)
            row["mpi4py_s"] = latencies(lambda: comm.Allreduce(buf, out, op=MPI.SUM), args.iters)
        rows.append(row)
    return {"rows": rows, "idle_cpu_per_s": idle_cpu(hvd, tf, args.idle_s)}


def main(argv=None):
    args = parse(argv)
    bound = common.bind_like_training() if args.bind else None
    comm = None
    if args.mpi:
        from mpi4py import MPI  # initialises MPI before Horovod can own it
        comm = MPI.COMM_WORLD
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import horovod.tensorflow as hvd
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = [tuple(c.split(":")) for c in args.configs.split(",")]
    runs = []
    for rnd in range(args.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]  # no config always runs first
        for cycle_ms, cache in order:
            apply_config(cycle_ms, cache)
            hvd.init()
            got = measure_one(hvd, tf, comm, sizes, args)
            everyone = hvd.allgather_object(got)
            rank = hvd.rank()
            hvd.shutdown()
            runs.append({"round": rnd, "cycle_ms": float(cycle_ms), "cache": cache,
                         "per_rank": everyone, "bound": bound})
    cpu, wall = common.cpu_seconds(), time.perf_counter()
    time.sleep(args.idle_s)  # the same sleep with Horovod shut down: TF's own idle cost
    baseline = (common.cpu_seconds() - cpu) / (time.perf_counter() - wall)
    if rank == 0:
        env = {k: os.environ.get(k) for k in ("OMPI_MCA_mpi_yield_when_idle",
                                               "HOROVOD_FUSION_THRESHOLD")}
        with open(args.out, "w") as f:
            json.dump({"controller": "mpi" if args.mpi else "gloo", "env": env,
                       "runs": runs, "idle_cpu_no_horovod_r0": baseline}, f)
    print(json.dumps({"rank": rank, "done": True}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
