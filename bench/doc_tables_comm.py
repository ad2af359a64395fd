"""docs/benchmarks.md's tables of bench/comm.py's figures: a small allreduce in a step,
M3's bandwidth, M4's many small tensors and M5's accumulation. Each takes one or more
kept runs of comm.py (run 1, run 2, ...) and sets them side by side: at these sizes one
run's figure moves with the host's load, and two runs say how far."""
from bench import comm, common
from bench.doc_tables import conditions, markdown, ranged


def _us(seconds: float) -> str:
    return f"{1e6 * seconds:,.0f}"


def provenance(runs: list) -> str:
    return "\n\n".join(conditions(r, f"run {i}") for i, r in enumerate(runs, 1))


def small_allreduce(runs: list) -> str:
    """Microseconds of one allreduce inside a compiled step, MPI and Gloo, up to 1 MiB."""
    headers = ["size"]
    for i in range(1, len(runs) + 1):
        headers += [f"run {i}: MPI", f"run {i}: Gloo"]
    headers.append("mpi4py alone (" + ", ".join(f"run {i}" for i in range(1, len(runs) + 1)) + ")")
    rows = []
    for n, row in enumerate(runs[0]["m3"]):
        if row["bytes"] > comm.SMALL_MAX:
            break
        cells = [common.size_label(row["bytes"])]
        for r in runs:
            cells += [_us(r["m3"][n]["ours_s"]), _us(r["m3_gloo"][n]["ours_s"])]
        cells.append(", ".join(_us(r["m3"][n]["bare_mpi4py_s"]) for r in runs))
        rows.append(cells)
    return "\n".join([provenance(runs), "", markdown(headers, rows)])


def m3(runs: list) -> str:
    """Ours against mpi4py alone, per size: time and the busbw ratio."""
    headers = ["size"]
    for i in range(1, len(runs) + 1):
        headers += [f"run {i}: ours us", "mpi4py alone us", "ours / alone"]
    rows = []
    for n, row in enumerate(runs[0]["m3"]):
        cells = [common.size_label(row["bytes"])]
        for r in runs:
            x = r["m3"][n]
            cells += [_us(x["ours_s"]), _us(x["bare_mpi4py_s"]), f"{x['ratio']:.2f}"]
        rows.append(cells)
    return "\n".join([provenance(runs), "", markdown(headers, rows)])


# comm_worker.m4's names -> what the doc calls them; in-process mpi4py is not shown.
M4_ROWS = {"grouped (ours)": "**ours (`allreduce_gradients`: one bucket packed into one tensor)**",
           "Horovod grouped_allreduce": "Horovod `grouped_allreduce` (what a Horovod user calls)",
           "one op per tensor, one graph": "Horovod, one op per tensor in the step",
           "one tensor (ours)": "one tensor of the same bytes (ours)",
           "one eager call per tensor": "one eager `hvd.allreduce` per tensor"}
M4_ALONE = {"mpi4py per tensor": "mpi4py per tensor, alone",
            "mpi4py one buffer": "**mpi4py one buffer, alone**"}


def m4(runs: list) -> str:
    """Milliseconds of allreduce for one step's many small tensors, each way."""
    rows = [[label, *(f"{1e3 * r['m4']['seconds'][key]:.2f}" for r in runs)]
            for key, label in M4_ROWS.items()]
    rows += [[label, *(f"{1e3 * r['m4']['bare_seconds'][key]:.2f}" for r in runs)]
             for key, label in M4_ALONE.items()]
    ratios = ", ".join(f"{r['m4']['grouped_over_mpi4py']:.2f} (run {i})"
                       for i, r in enumerate(runs, 1))
    m4_ = runs[0]["m4"]
    return "\n".join([
        provenance(runs), "",
        f"{m4_['tensors']} tensors of {common.size_label(m4_['tensor_bytes'])}, ms of allreduce:",
        "", markdown(["how", *(f"run {i}" for i in range(1, len(runs) + 1))], rows), "",
        f"Ours / mpi4py's one buffer alone: {ratios}; target <= {comm.M4_TARGET:g}."])


def m5(runs: list) -> str:
    """Efficiency of the step with its allreduce against the same step without, per k."""
    headers = ["k", "allreduce ops per optimizer step"]
    for i in range(1, len(runs) + 1):
        headers += [f"run {i}: wall (range)", "CPU (range)"]
    rows = []
    for n, x in enumerate(runs[0]["m5"]):
        cells = [x["k"], x["collective_ops_per_step"]]
        for r in runs:
            y = r["m5"][n]
            cells += [ranged(y["efficiency"], y["split"]["wall_range"]),
                      ranged(y["cpu_efficiency"], y["split"]["cpu_range"])]
        rows.append(cells)
    return "\n".join([provenance(runs), "", markdown(headers, rows)])
