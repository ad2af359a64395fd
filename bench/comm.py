"""M3 allreduce bandwidth, M4 fusion gain, M5 accumulation: one 2-rank MPI launch.

  python bench/comm.py [--short] [--out runs/bench/comm.json]

bench/comm_worker.py runs in both ranks under `horovodrun --mpi`: our gradient path
(HorovodBackend.allreduce_gradients, a grouped allreduce, as the step calls it) and
raw mpi4py on the same MPI, interleaved. busbw as nccl-tests defines it:
algbw * 2(n-1)/n. Targets: M3 ours/mpi4py busbw >= 0.9 from 16 MiB up (issue 23).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

M3_TARGET, M3_FROM = 0.9, 16 << 20
M4_TARGET = 2.0  # our grouped allreduce / mpi4py's one buffer of the same bytes, at most
FULL_ROUNDS = 3  # comm_worker.py's default --rounds


def measure(short: bool) -> dict:
    worker = [common.PY, os.path.join(common.ROOT, "bench", "comm_worker.py")]
    opts = ["--rounds=2", "--budget_mib=512", "--steps=3", "--max_mib=64"] if short else ["--rounds=3"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "comm.json")
        common.run(common.launcher("mpi", 2) + worker + opts + [f"--out={path}"], timeout=1500)
        with open(path) as f:
            result = json.load(f)
    n = result["ranks"]
    for row in result["m3"]:
        row["ours_busbw"] = common.busbw(row["bytes"], row["ours_s"], n)[1]
        row["mpi4py_busbw"] = common.busbw(row["bytes"], row["mpi4py_s"], n)[1]
        row["ratio"] = row["ours_busbw"] / row["mpi4py_busbw"]
    secs = result["m4"]["seconds"]
    result["m4"]["fusion_gain"] = secs["one eager call per tensor"] / secs["grouped (ours)"]
    result["m4"]["grouped_over_one_tensor"] = secs["grouped (ours)"] / secs["one tensor (ours)"]
    result["m4"]["grouped_over_mpi4py"] = secs["grouped (ours)"] / secs["mpi4py one buffer"]
    big = [r["ratio"] for r in result["m3"] if r["bytes"] >= M3_FROM]
    result["m3_target_met"] = bool(big) and min(big) >= M3_TARGET
    return result


def report(r: dict) -> str:
    m3 = [[common.size_label(x["bytes"]), 1e6 * x["ours_s"], 1e6 * x["mpi4py_s"],
           x["ours_busbw"], x["mpi4py_busbw"], f"{x['ratio']:.2f}"] for x in r["m3"]]
    m4 = r["m4"]
    m4_rows = [[name, f"{1e3 * s:.2f}"] for name, s in m4["seconds"].items()]
    return "\n".join([
        f"M3 allreduce, {r['ranks']} ranks, MPI controller, float32 (env {r['env']})",
        common.table(["size", "ours us", "mpi4py us", "ours busbw GB/s", "mpi4py busbw GB/s",
                      "ours/mpi4py"], m3),
        f"target >= {M3_TARGET} from {common.size_label(M3_FROM)} up: {'met' if r['m3_target_met'] else 'MISSED'}",
        "",
        f"M4 {m4['tensors']} tensors of {common.size_label(m4['tensor_bytes'])} (ms per allreduce "
        "of all of them)",
        common.table(["how", "ms"], m4_rows),
        f"fusion gain (one eager call per tensor / grouped) = {m4['fusion_gain']:.1f}x; "
        f"grouped / one tensor of the same bytes = {m4['grouped_over_one_tensor']:.2f}",
        f"grouped / mpi4py's one buffer = {m4['grouped_over_mpi4py']:.2f} (target <= {M4_TARGET:g}: "
        f"{'met' if m4['grouped_over_mpi4py'] <= M4_TARGET else 'MISSED'})",
        "",
        *m5_lines(r["m5"]),
    ])


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
