"""Runs inside every rank for M3, M4 and M5 (started by bench/comm.py).

  horovodrun -np 2 -H localhost:2 --mpi python bench/comm_worker.py --figures m3,m4,m5

Our backend joins the job first (so its CPU-sharing defaults are in force, as in
training), then mpi4py attaches to the MPI that Horovod initialised: the in-process
baseline runs on the same MPI, with the same settings, in the same processes, beside
Horovod's background thread. With --bare the ranks run mpi4py alone (no TensorFlow, no
Horovod, the same MPI settings and binding): what a user's raw MPI program gets, the
baseline the targets are read against. Rank 0 prints one JSON line with the figures.
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
    p.add_argument("--bare", action="store_true", help="mpi4py only: M3's sizes and M4's "
                   "buffers, no TensorFlow or Horovod in the process")
    p.add_argument("--gloo", action="store_true", help="launched by horovodrun --gloo: no "
                   "MPI in the job, so no mpi4py beside ours (M3 only)")
    p.add_argument("--out", default="", help="rank 0 also writes the JSON here")
    return p.parse_args(argv)


class Clock:
    """Times `fn` so that every rank starts together (a barrier first). `barrier()` and
    `sum_all(x)` are the job's: mpi4py's under MPI, Horovod's under Gloo."""

    def __init__(self, barrier, sum_all):
        self.barrier, self.sum_all = barrier, sum_all

    @classmethod
    def over(cls, comm):
        return cls(comm.Barrier, comm.allreduce)

    def seconds(self, fn, iters: int) -> float:
        return self.timed(fn, iters)[0]

    def timed(self, fn, iters: int) -> tuple:
        """(wall seconds, CPU seconds of every rank summed) per call of fn; CPU is each
        rank's user + system (os.times) over its calls, the final barrier excluded."""
        self.barrier()
        start, cpu = time.perf_counter(), os.times()
        for _ in range(iters):
            fn()
        end = os.times()
        self.barrier()
        wall = time.perf_counter() - start
        mine = (end.user - cpu.user) + (end.system - cpu.system)
        return wall / iters, self.sum_all(mine) / iters


def in_step(tf, reduce, variables):
    """A call of one compiled step's worth of work around `reduce`: the tensors are made
    inside the tf.function (from variables, as backprop makes its gradients) and every
    result is read (as the optimizer reads them). A step never passes its gradients across
    the function's boundary, and 128 tensors in and out of a call cost more than their
    allreduce (docs/benchmarks.md, M4). The allreduce's cost in a step is this call minus
    the same call with `reduce` = identity."""
    @tf.function
    def step():
        grads = [v * 1.0 for v in variables]
        return tf.add_n([g[0] for g in reduce(grads)])
    return lambda: step().numpy()


def same(tensors):
    return tensors


def m3_sizes(args) -> list:
    """(bytes, timed calls per round) of every M3 message: the same for ours and bare."""
    from bench import common
    return [(size, max(3, min(50, args.budget_mib * MiB // size // (2 * args.rounds))))
            for size in common.sizes_pow2(4096, args.max_mib * MiB)]


def mpi4py_allreduce(comm, n: int):
    """A call of mpi4py's Allreduce (sum) of n float32, its buffers made once."""
    import numpy as np
    from mpi4py import MPI
    buf, out = np.ones(n, np.float32), np.empty(n, np.float32)
    return lambda: comm.Allreduce(buf, out, op=MPI.SUM)


def mpi4py_m4(comm, args) -> dict:
    """M4's raw MPI cases: the tensors one Allreduce each, and one buffer of them all."""
    n = args.tensor_kib * 1024 // 4
    each = [mpi4py_allreduce(comm, n) for _ in range(args.tensors)]
    return {"mpi4py per tensor": lambda: [call() for call in each],
            "mpi4py one buffer": mpi4py_allreduce(comm, n * args.tensors)}


def interleaved(clock, calls: dict, rounds: int, iters: int) -> dict:
    """Median seconds per call of each of `calls`, timed in turn, `rounds` times."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            times[name].append(clock.seconds(fn, iters))
    return {name: statistics.median(v) for name, v in times.items()}


def bare(comm, clock, args) -> dict:
    """mpi4py alone: M3's messages and M4's buffers, timed as in the full worker."""
    rows = []
    for size, iters in m3_sizes(args):
        call = {"mpi4py": mpi4py_allreduce(comm, size // 4)}
        for _ in range(3):
            call["mpi4py"]()
        rows.append({"bytes": size, "iters": iters,
                     "mpi4py_s": interleaved(clock, call, args.rounds, iters)["mpi4py"]})
    cases = mpi4py_m4(comm, args)
    for fn in cases.values():
        fn()
    return {"m3": rows, "m4": interleaved(clock, cases, args.rounds, 5)}


def m3(tf, backend, comm, clock, args) -> list:
    """Allreduce time of one message, ours (the step's allreduce_gradients, in_step) vs
    mpi4py's Allreduce of the same float32 buffer (when the job has MPI: comm); medians
    of interleaved rounds."""
    rows = []
    for size, iters in m3_sizes(args):
        n = size // 4
        x = [tf.Variable(tf.ones([n], tf.float32))]
        cases = {"ours": in_step(tf, backend.allreduce_gradients, x),
                 "without": in_step(tf, same, x)}
        if comm is not None:
            cases["mpi4py"] = mpi4py_allreduce(comm, n)
        # Warm-up: traces for this shape, and grows TF's pooled allocator to this size as
        # a training run's first steps do (with one call, round 1 paid for the growth).
        for _ in range(3):
            for fn in cases.values():
                fn()
        t = interleaved(clock, cases, args.rounds, iters)
        rows.append({"bytes": size, "iters": iters, "ours_call_s": t["ours"],
                     "without_s": t["without"], "ours_s": t["ours"] - t["without"],
                     "mpi4py_s": t.get("mpi4py")})
        del x
    return rows


def m4(tf, backend, comm, clock, args) -> dict:
    """Many small tensors, as one step's gradients: each way of reducing them inside a
    step (in_step), its cost the call minus the same call without it; Horovod's eager
    calls and mpi4py's are bare."""
    import horovod.tensorflow as hvd  # bare Horovod beside ours; setup() ran hvd.init
    n = args.tensor_kib * 1024 // 4
    small = [tf.Variable(tf.fill([n], float(i))) for i in range(args.tensors)]
    whole = [tf.Variable(tf.ones([n * args.tensors]))]

    def per_op(ts):
        return [hvd.allreduce(t, op=hvd.Average, name=f"m4_{i}") for i, t in enumerate(ts)]

    cases = {  # name: (call, the same call without the allreduce, or None for bare calls)
        "grouped (ours)": (in_step(tf, backend.allreduce_gradients, small), "small"),
        "Horovod grouped_allreduce": (
            in_step(tf, lambda ts: hvd.grouped_allreduce(ts, op=hvd.Average), small), "small"),
        "one op per tensor, one graph": (in_step(tf, per_op, small), "small"),
        "one tensor (ours)": (in_step(tf, backend.allreduce_gradients, whole), "whole"),
        "one eager call per tensor": (lambda: [hvd.allreduce(v, op=hvd.Average)[:1].numpy()
                                               for v in small], None),
        **{name: (fn, None) for name, fn in mpi4py_m4(comm, args).items()},
    }
    calls = {**{name: fn for name, (fn, _) in cases.items()},
             "small": in_step(tf, same, small), "whole": in_step(tf, same, whole)}
    for fn in calls.values():
        fn()  # trace and warm
    call = interleaved(clock, calls, args.rounds, 5)
    return {"tensors": args.tensors, "tensor_bytes": n * 4, "call_seconds": call,
            "seconds": {name: call[name] - (call[base] if base else 0.0)
                        for name, (_, base) in cases.items()}}


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


def main_bare(args, bound):
    # The MPI settings our backend chooses for ranks sharing a host, read at MPI_Init.
    from launch import horovod_build
    for name, value in horovod_build.cpu_sharing_defaults(horovod_build.detect()).items():
        os.environ.setdefault(name, value)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    figures = {"ranks": comm.Get_size(), "bound_cpus": bound,
               **bare(comm, Clock.over(comm), args)}
    write(comm.Get_rank(), figures, args.out)


def write(rank: int, figures: dict, out: str):
    if rank == 0:
        print(json.dumps(figures), flush=True)
        if out:  # launchers split long stdout lines; a file arrives whole
            with open(out, "w") as f:
                json.dump(figures, f)


def main(argv=None):
    args = parse(argv)
    from bench import common
    bound = common.bind_like_training()  # as our program binds ranks sharing a host
    if args.bare:
        return main_bare(args, bound)
    from horovod_train import runtime
    allocator = runtime.choose_cpu_allocator()  # as our program does, before TF's first op
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from horovod_train.backends.horovod import HorovodBackend
    backend = HorovodBackend()
    info = backend.setup()  # hvd.init(): MPI starts here, with our defaults in force
    if args.gloo:
        comm = None
        clock = Clock(backend.barrier, lambda x: float(backend.allreduce_mean(
            tf.constant(x, tf.float64))) * info.size)
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        clock = Clock.over(comm)
    figures = {"ranks": info.size, "bound_cpus": bound, "chosen_env": {**allocator, **backend.chosen_env},
               "controller": "gloo" if args.gloo else "mpi",
               "env": {k: os.environ.get(k) for k in
                       ("HOROVOD_CYCLE_TIME", "OMPI_MCA_mpi_yield_when_idle",
                        "HOROVOD_FUSION_THRESHOLD")}}
    for name in args.figures.split(","):
        figures[name] = globals()[name](tf, backend, comm, clock, args)
    write(info.rank, figures, args.out)
    backend.barrier()


if __name__ == "__main__":
    main()
