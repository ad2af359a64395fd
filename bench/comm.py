"""M3 allreduce bandwidth, M4 fusion gain, M5 accumulation; small allreduces in a step.

  python bench/comm.py [--short] [--out runs/bench/comm.json]

bench/comm_worker.py runs in both ranks under `horovodrun --mpi`, each bound to its core as
our program binds ranks that share a host: our gradient path
(HorovodBackend.allreduce_gradients) inside a compiled step, its cost the step minus the
same step without it, and raw mpi4py on the same MPI, interleaved ("in-process"). A second
launch runs mpi4py alone (--bare: no TensorFlow, no Horovod, the same MPI settings and
binding), what a user would run instead; the targets are read against it. In-process
mpi4py is slower, since Horovod's background thread shares the rank's core
(docs/benchmarks.md, M3). A third launch, under `horovodrun --gloo`, times ours in a
step the same way; with M3's MPI rows up to 1 MiB it gives the latency of a small
allreduce as a training step pays it, under both controllers. busbw as nccl-tests
defines it: algbw * 2(n-1)/n. Targets (issue 23): M3 ours/mpi4py busbw >= 0.9 from
16 MiB up, M4 grouped <= 2x mpi4py's one buffer, a small allreduce <= 1 ms.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

M3_TARGET, M3_FROM = 0.9, 16 << 20
M4_TARGET = 2.0  # our grouped allreduce / mpi4py's one buffer of the same bytes, at most
SMALL_MAX, SMALL_TARGET_US = 1 << 20, 1000.0  # a small allreduce: up to 1 MiB, <= 1 ms
M5_TARGET = 0.95  # k = 1: wall efficiency of the step with its allreduce / without, at least
FULL_ROUNDS = 3  # comm_worker.py's default --rounds


def measure(short: bool) -> dict:
    worker = [common.PY, os.path.join(common.ROOT, "bench", "comm_worker.py")]
    opts = ["--rounds=2", "--budget_mib=512", "--steps=3", "--max_mib=64"] if short else ["--rounds=3"]
    result = launch(worker + opts)
    bare = launch(worker + opts + ["--bare", "--figures=m3,m4"])
    gloo = launch(worker + opts + ["--gloo", "--figures=m3"], controller="gloo")
    n = result["ranks"]
    result["m3_gloo"] = [{"bytes": row["bytes"], "ours_s": row["ours_s"],
                          "bare_mpi4py_s": alone["mpi4py_s"]}
                         for row, alone in zip(gloo["m3"], bare["m3"])]
    for row, alone in zip(result["m3"], bare["m3"]):
        row["bare_mpi4py_s"] = alone["mpi4py_s"]
        for name in ("ours", "mpi4py", "bare_mpi4py"):
            row[f"{name}_busbw"] = common.busbw(row["bytes"], row[f"{name}_s"], n)[1]
        row["ratio"] = row["ours_busbw"] / row["bare_mpi4py_busbw"]
        row["ratio_in_process"] = row["ours_busbw"] / row["mpi4py_busbw"]
    m4 = result["m4"]
    secs = m4["seconds"]
    m4["bare_seconds"] = bare["m4"]
    m4["fusion_gain"] = secs["one eager call per tensor"] / secs["grouped (ours)"]
    m4["grouped_over_one_tensor"] = secs["grouped (ours)"] / secs["one tensor (ours)"]
    m4["grouped_over_mpi4py"] = secs["grouped (ours)"] / bare["m4"]["mpi4py one buffer"]
    m4["grouped_over_mpi4py_in_process"] = secs["grouped (ours)"] / secs["mpi4py one buffer"]
    big = [r["ratio"] for r in result["m3"] if r["bytes"] >= M3_FROM]
    result["m3_target_met"] = bool(big) and min(big) >= M3_TARGET
    return result


def launch(argv: list, controller: str = "mpi") -> dict:
    """The JSON that rank 0 of a 2-rank `horovodrun --<controller>` of argv writes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "comm.json")
        common.run(common.launcher(controller, 2) + argv + [f"--out={path}"], timeout=1500)
        with open(path) as f:
            return json.load(f)


def report(r: dict) -> str:
    m3 = [[common.size_label(x["bytes"]), 1e6 * x["ours_s"], 1e6 * x["bare_mpi4py_s"],
           1e6 * x["mpi4py_s"], x["ours_busbw"], x["bare_mpi4py_busbw"], f"{x['ratio']:.2f}",
           f"{x['ratio_in_process']:.2f}"] for x in r["m3"]]
    m4 = r["m4"]
    calls = m4["call_seconds"]
    m4_rows = [[name, f"{1e3 * calls[name]:.2f}", f"{1e3 * s:.2f}"] for name, s in m4["seconds"].items()]
    m4_rows += [[f"{name}, alone", "", f"{1e3 * s:.2f}"] for name, s in m4["bare_seconds"].items()]
    return "\n".join([
        f"M3 allreduce, {r['ranks']} ranks, MPI controller, float32, rank 0 bound to CPUs "
        f"{r['bound_cpus']} (env {r['env']}); mpi4py alone (its own launch) and in-process "
        "(beside Horovod's thread)",
        common.table(["size", "ours us", "mpi4py alone us", "in-process us", "ours busbw GB/s",
                      "alone busbw GB/s", "ours/alone", "ours/in-process"], m3),
        f"target ours/alone >= {M3_TARGET} from {common.size_label(M3_FROM)} up: {'met' if r['m3_target_met'] else 'MISSED'}",
        "",
        *small_lines(r),
        "",
        f"M4 {m4['tensors']} tensors of {common.size_label(m4['tensor_bytes'])}, ms per allreduce "
        "of all of them; in a step = inside a tf.function that makes the tensors and reads "
        "every result, minus that function without the allreduce "
        f"({1e3 * calls['small']:.2f} ms for {m4['tensors']} tensors, "
        f"{1e3 * calls['whole']:.2f} ms for one)",
        common.table(["how", "ms per call", "ms of allreduce"], m4_rows),
        f"fusion gain (one eager call per tensor / grouped) = {m4['fusion_gain']:.1f}x; "
        f"grouped / one tensor of the same bytes = {m4['grouped_over_one_tensor']:.2f}",
        f"grouped / mpi4py's one buffer alone = {m4['grouped_over_mpi4py']:.2f} (target <= "
        f"{M4_TARGET:g}: {'met' if m4['grouped_over_mpi4py'] <= M4_TARGET else 'MISSED'}); "
        f"/ in-process = {m4['grouped_over_mpi4py_in_process']:.2f}",
        "",
        *m5_lines(r["m5"]),
    ])


def small_lines(r: dict) -> list:
    """One allreduce inside a compiled step, as training runs it, under both of
    Horovod's CPU controllers, beside mpi4py alone (the M3 rows up to SMALL_MAX)."""
    rows = []
    for mpi, gloo in zip(r["m3"], r["m3_gloo"]):
        if mpi["bytes"] > SMALL_MAX:
            break
        rows.append([common.size_label(mpi["bytes"]), f"{1e6 * mpi['ours_s']:.0f}",
                     f"{1e6 * gloo['ours_s']:.0f}", f"{1e6 * mpi['bare_mpi4py_s']:.0f}"]
                    + ["met" if max(mpi["ours_s"], gloo["ours_s"]) * 1e6 <= SMALL_TARGET_US
                       else "MISSED"])
    return [f"One allreduce in a step (the step's path, as M3), us; target <= "
            f"{SMALL_TARGET_US:g} us under both controllers",
            common.table(["size", "ours, MPI", "ours, Gloo", "mpi4py alone", "target"], rows)]


def m5_lines(rows: list) -> list:
    """The M5 table (wall and CPU efficiency with their ranges over the rounds) and the
    k=1 split into the no-comm work, extra CPU work and waiting."""
    m5 = [[x["k"], x["collective_ops_per_step"], f"{x['collective_ops_per_step'] / x['k']:.3g}",
           f"{x['samples_per_sec']['allreduce']:.1f}", f"{x['samples_per_sec']['no_comm']:.1f}",
           f"{1e3 * x['cpu_s_per_sample']['allreduce']:.2f}",
           f"{1e3 * x['cpu_s_per_sample']['no_comm']:.2f}",
           f"{x['efficiency']:.3f}", common.fmt_range(x["split"]["wall_range"], digits=3),
           f"{x['cpu_efficiency']:.3f}", common.fmt_range(x["split"]["cpu_range"], digits=3)]
          for x in rows]
    rounds = rows[0]["split"]["repeats"]
    fewer = (f" (short version: fewer than the full version's {FULL_ROUNDS})"
             if rounds < FULL_ROUNDS else "")
    return [
        "M5 accumulation: digits_cnn 32x32x3, micro-batch 64, 2 ranks x 1 thread; efficiency "
        "= our step with its allreduce / the same step without (both on 2 live ranks), in wall "
        f"clock and CPU-seconds per image (all ranks); {rounds} interleaved rounds{fewer}, "
        "ranges over rounds",
        common.table(["k", "allreduce ops/step", "ops per micro-batch", "img/s per rank",
                      "no-comm img/s", "CPU ms/img", "no-comm CPU ms/img", "wall eff", "range",
                      "CPU eff", "range"], m5),
        *(f"k={x['k']} (the step without comm as the 1-rank work): {common.interpret(x['split'])}"
          for x in rows if x["k"] == 1),
    ]


if __name__ == "__main__":
    common.main("comm", __doc__, measure, report)
