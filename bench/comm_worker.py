"""Runs inside every rank for M3, M4 and M5 (started by bench/comm.py).

  horovodrun -np 2 -H localhost:2 --mpi python bench/comm_worker.py --figures m3,m4,m5

Our backend joins the job first (so its CPU-sharing defaults are in force, as in
training), then mpi4py attaches to the MPI that Horovod initialised: the raw
baseline runs on the same MPI, with the same settings, in the same processes.
Rank 0 prints one JSON line with the figures.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MiB = 1 << 20


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--figures", default="m3,m4,m5")
    p.add_argument("--max_mib", type=int, default=256, help="M3: largest message")
    p.add_argument("--budget_mib", type=int, default=1024, help="M3: bytes timed per size")
    p.add_argument("--tensors", type=int, default=128, help="M4: small tensors")
    p.add_argument("--tensor_kib", type=int, default=16, help="M4: size of each")
    p.add_argument("--accum", default="1,2,4,8", help="M5: k values")
    p.add_argument("--steps", type=int, default=6, help="M5: steps per timed block")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repeats")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--out", default="", help="rank 0 also writes the JSON here")
    return p.parse_args(argv)


class Clock:
    """Times `fn` so that every rank starts together (an MPI barrier first)."""

    def __init__(self, comm):
        self.comm = comm

    def seconds(self, fn, iters: int) -> float:
        return self.timed(fn, iters)[0]

    def timed(self, fn, iters: int) -> tuple:
        """(wall seconds, CPU seconds of every rank summed) per call of fn; CPU is each
        rank's user + system (os.times) over its calls, the final barrier excluded."""
        self.comm.Barrier()
        start, cpu = time.perf_counter(), os.times()
        for _ in range(iters):
            fn()
        end = os.times()
        self.comm.Barrier()
        wall = time.perf_counter() - start
        mine = (end.user - cpu.user) + (end.system - cpu.system)
        return wall / iters, self.comm.allreduce(mine) / iters


def _ours_allreduce(tf, backend):
    fn = tf.function(lambda ts: backend.allreduce_gradients(ts))
    # Reading one element waits for the collective without copying the result out.
    return lambda ts: fn(ts)[-1][:1].numpy()


def m3(tf, backend, comm, clock, args) -> list:
    """Allreduce time of one message, ours (grouped_allreduce as the step calls it) vs
    mpi4py's Allreduce of the same float32 buffer; medians of interleaved rounds."""
    import numpy as np
    from mpi4py import MPI
    ours = _ours_allreduce(tf, backend)
    from bench import common
    rows = []
    for size in common.sizes_pow2(4096, args.max_mib * MiB):
        n = size // 4
        x = [tf.ones([n], tf.float32)]
        buf, out = np.ones(n, np.float32), np.empty(n, np.float32)
        iters = max(3, min(50, args.budget_mib * MiB // size // (2 * args.rounds)))
        # Warm-up: traces for this shape, and grows TF's pooled allocator to this size as
        # a training run's first steps do (with one call, round 1 paid for the growth).
        for _ in range(3):
            ours(x)
            comm.Allreduce(buf, out, op=MPI.SUM)
        t_ours, t_mpi = [], []
        for _ in range(args.rounds):
            t_ours.append(clock.seconds(lambda: ours(x), iters))
            t_mpi.append(clock.seconds(lambda: comm.Allreduce(buf, out, op=MPI.SUM), iters))
        rows.append({"bytes": size, "iters": iters, "ours_s": statistics.median(t_ours),
                     "mpi4py_s": statistics.median(t_mpi)})
    return rows


def m4(tf, backend, comm, clock, args) -> dict:
    """Many small tensors: fused (ours: one grouped allreduce), Horovod's per-tensor ops
    in one graph (fused by its cycle timer), one eager call per tensor (nothing to fuse
    them), one tensor of the same total, and mpi4py per tensor / in one buffer."""
    import numpy as np
    from mpi4py import MPI
    import horovod.tensorflow as hvd  # bare Horovod beside ours; setup() ran hvd.init
    n = args.tensor_kib * 1024 // 4
    small = [tf.fill([n], float(i)) for i in range(args.tensors)]
    whole = [tf.ones([n * args.tensors])]
    ours = _ours_allreduce(tf, backend)
    per_op = tf.function(lambda ts: [hvd.allreduce(t, op=hvd.Average, name=f"m4_{i}")
                                     for i, t in enumerate(ts)])
    bufs = [np.full(n, i, np.float32) for i in range(args.tensors)]
    outs = [np.empty(n, np.float32) for _ in bufs]
    big, big_out = np.ones(n * args.tensors, np.float32), np.empty(n * args.tensors, np.float32)

    cases = {
        "grouped (ours)": lambda: ours(small),
        "one op per tensor, one graph": lambda: per_op(small)[-1][:1].numpy(),
        "one eager call per tensor": lambda: [hvd.allreduce(t, op=hvd.Average)[:1].numpy()
                                              for t in small],
        "one tensor (ours)": lambda: ours(whole),
        "mpi4py per tensor": lambda: [comm.Allreduce(b, o, op=MPI.SUM) for b, o in zip(bufs, outs)],
        "mpi4py one buffer": lambda: comm.Allreduce(big, big_out, op=MPI.SUM),
    }
    for fn in cases.values():
        fn()  # trace and warm
    times = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            times[name].append(clock.seconds(fn, 3))
    return {"tensors": args.tensors, "tensor_bytes": n * 4,
            "seconds": {k: statistics.median(v) for k, v in times.items()}}


def m5(tf, backend, comm, clock, args) -> list:
    """Per k: collective ops per optimizer step, and our fused step with its allreduce
    against the same step without it (local backend), both on 2 live ranks, in wall
    clock and in CPU-seconds per image (all ranks): the share the communication leaves,
    and how much of its cost is CPU work and how much waiting (common.efficiency)."""
    import keras
    import models
    from bench import common
    from horovod_train.backends.local import LocalBackend
    from horovod_train.step import StepOptions, TrainStep
    local = LocalBackend()
    local.setup()
    rows = []
    for k in (int(v) for v in args.accum.split(",")):
        model = models.get_model("digits_cnn", input_shape=(32, 32, 3), num_classes=10)
        steps = {}
        for name, be in (("allreduce", backend), ("no_comm", local)):
            opt = keras.optimizers.Adam(0.002)
            opt.build(model.trainable_variables)
            steps[name] = TrainStep(model, opt, be, StepOptions(accum_steps=k))
        x = tf.random.uniform([k * args.batch_size, 32, 32, 3])
        y = tf.random.uniform([k * args.batch_size], maxval=10, dtype=tf.int32)
        no = (tf.constant(False), tf.constant(0.0))  # no poison, no stop vote
        runs = {name: (lambda s=s: float(s.fused(x, y, *no)[0])) for name, s in steps.items()}
        for fn in runs.values():
            fn()
        per_round = {name: [] for name in runs}
        samples = k * args.batch_size  # per rank and step
        for _ in range(args.rounds):  # interleaved: with, without, with, ...
            for name, fn in runs.items():
                wall, cpu = clock.timed(fn, args.steps)
                per_round[name].append({"rate": samples / wall, "cpu": cpu / (samples * comm.size)})
        eff = common.efficiency(per_round["no_comm"], per_round["allreduce"])
        ops = steps["allreduce"].collective_ops_per_step(x, y)
        rows.append({"k": k, "collective_ops_per_step": ops,
                     "samples_per_step": samples, "rounds": per_round,
                     "samples_per_sec": {n: statistics.fmean(r["rate"] for r in v)
                                         for n, v in per_round.items()},
                     "cpu_s_per_sample": {n: statistics.fmean(r["cpu"] for r in v)
                                          for n, v in per_round.items()},
                     "efficiency": eff["wall"], "cpu_efficiency": eff["cpu"], "split": eff,
                     "wire_bytes_per_step": backend.wire_bytes_per_step})
    return rows


def main(argv=None):
    args = parse(argv)
    from horovod_train import runtime
    allocator = runtime.choose_cpu_allocator()  # as our program does, before TF's first op
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from horovod_train.backends.horovod import HorovodBackend
    backend = HorovodBackend()
    info = backend.setup()  # hvd.init(): MPI starts here, with our defaults in force
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    clock = Clock(comm)
    figures = {"ranks": info.size, "chosen_env": {**allocator, **backend.chosen_env},
               "env": {k: os.environ.get(k) for k in
                       ("HOROVOD_CYCLE_TIME", "OMPI_MCA_mpi_yield_when_idle",
                        "HOROVOD_FUSION_THRESHOLD")}}
    for name in args.figures.split(","):
        figures[name] = globals()[name](tf, backend, comm, clock, args)
    if info.rank == 0:
        print(json.dumps(figures), flush=True)
        if args.out:  # launchers split long stdout lines; a file arrives whole
            with open(args.out, "w") as f:
                json.dump(figures, f)
    backend.barrier()


if __name__ == "__main__":
    main()
