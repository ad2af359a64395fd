"""docs/benchmarks.md's tables of bench/comm.py's figures: a small allreduce in a step,
M3's bandwidth, M4's many small tensors and M5's accumulation. Each takes one or more
kept runs of comm.py and, given several, sets them side by side (run 1, run 2, ...): at
these sizes one run's figure moves with the host's load, and two runs say how far. Each
ends with its target's verdict, run by run."""
from bench import comm, common
from bench.doc_tables import conditions, markdown, ranged, verdict


def _us(seconds: float) -> str:
    return f"{1e6 * seconds:,.0f}"


def _run(i: int, runs: list, sep: str = ": ") -> str:
    """'run 2: ' when runs are set side by side; nothing for a single run."""
    return f"run {i}{sep}" if len(runs) > 1 else ""


def provenance(runs: list) -> str:
    return "\n\n".join(conditions(r, _run(i, runs, "")) for i, r in enumerate(runs, 1))


def _per_run(runs: list, parts) -> str:
    """'a (run 1), b (run 2)', or 'a' for a single run."""
    if len(runs) == 1:
        return parts[0]
    return ", ".join(f"{part} (run {i})" for i, part in enumerate(parts, 1))


def _small_rows(r: dict) -> list:
    return [(mpi, gloo) for mpi, gloo in zip(r["m3"], r["m3_gloo"])
            if mpi["bytes"] <= comm.SMALL_MAX]


def small_allreduce(runs: list) -> str:
    """Microseconds of one allreduce inside a compiled step, MPI and Gloo, up to 1 MiB."""
    headers = ["size"]
    for i in range(1, len(runs) + 1):
        headers += [f"{_run(i, runs)}MPI", f"{_run(i, runs)}Gloo"]
    alone = ", ".join(f"run {i}" for i in range(1, len(runs) + 1))
    headers.append(f"mpi4py alone ({alone})" if len(runs) > 1 else "mpi4py alone")
    rows = []
    for n, (row, _) in enumerate(_small_rows(runs[0])):
        cells = [common.size_label(row["bytes"])]
        for r in runs:
            cells += [_us(r["m3"][n]["ours_s"]), _us(r["m3_gloo"][n]["ours_s"])]
        cells.append(", ".join(_us(r["m3"][n]["bare_mpi4py_s"]) for r in runs))
        rows.append(cells)
    target = comm.SMALL_TARGET_US / 1e6
    verdicts = []
    for r in runs:
        over = [f"{common.size_label(m['bytes'])} {name} ({_us(x['ours_s'])} us)"
                for m, g in _small_rows(r) for name, x in (("MPI", m), ("Gloo", g))
                if x["ours_s"] > target]
        verdicts.append("**missed**: " + ", ".join(over) if over else "met at every size")
    return "\n".join([provenance(runs), "", markdown(headers, rows), "",
                      f"Target <= {comm.SMALL_TARGET_US:g} us under both controllers: "
                      f"{_per_run(runs, verdicts)}."])


def m3(runs: list) -> str:
    """Ours against mpi4py alone, per size: time and the busbw ratio; beside them the
    same mpi4py call in our ranks (beside Horovod's thread), which says how much of a gap
    is the process's rather than our path's."""
    headers = ["size"]
    for i in range(1, len(runs) + 1):
        headers += [f"{_run(i, runs)}ours us", "mpi4py alone us", "mpi4py in our ranks us",
                    "ours / alone"]
    rows = []
    for n, row in enumerate(runs[0]["m3"]):
        cells = [common.size_label(row["bytes"])]
        for r in runs:
            x = r["m3"][n]
            cells += [_us(x["ours_s"]), _us(x["bare_mpi4py_s"]), _us(x["mpi4py_s"]),
                      f"{x['ratio']:.2f}"]
        rows.append(cells)
    verdicts = []
    for r in runs:
        big = [x for x in r["m3"] if x["bytes"] >= comm.M3_FROM]
        verdicts.append(", ".join(f"{common.size_label(x['bytes'])} {x['ratio']:.2f} "
                                  f"{verdict(x['ratio'] >= comm.M3_TARGET)}" for x in big))
    return "\n".join([provenance(runs), "", markdown(headers, rows), "",
                      f"Target ours / alone >= {comm.M3_TARGET:g} from "
                      f"{common.size_label(comm.M3_FROM)} up: {_per_run(runs, verdicts)}."])


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
    ratios = [f"{x:.2f} {verdict(x <= comm.M4_TARGET)}"
              for x in (r["m4"]["grouped_over_mpi4py"] for r in runs)]
    m4_ = runs[0]["m4"]
    heads = [f"run {i}" for i in range(1, len(runs) + 1)] if len(runs) > 1 else ["ms"]
    return "\n".join([
        provenance(runs), "",
        f"{m4_['tensors']} tensors of {common.size_label(m4_['tensor_bytes'])}, ms of allreduce:",
        "", markdown(["how", *heads], rows), "",
        f"Ours / mpi4py's one buffer alone (target <= {comm.M4_TARGET:g}): "
        f"{_per_run(runs, ratios)}."])


def m5(runs: list) -> str:
    """Efficiency of the step with its allreduce against the same step without, per k."""
    headers = ["k", "allreduce ops per optimizer step"]
    for i in range(1, len(runs) + 1):
        headers += [f"{_run(i, runs)}wall (range)", "CPU (range)"]
    rows = []
    for n, x in enumerate(runs[0]["m5"]):
        cells = [x["k"], x["collective_ops_per_step"]]
        for r in runs:
            y = r["m5"][n]
            cells += [ranged(y["efficiency"], y["split"]["wall_range"]),
                      ranged(y["cpu_efficiency"], y["split"]["cpu_range"])]
        rows.append(cells)
    ones = [next(y for y in r["m5"] if y["k"] == 1) for r in runs]
    verdicts = [f"{y['efficiency']:.3f} {verdict(y['efficiency'] >= comm.M5_TARGET)}"
                for y in ones]
    return "\n".join([provenance(runs), "", markdown(headers, rows), "",
                      f"k = 1, wall clock (target >= {comm.M5_TARGET:g}): "
                      f"{_per_run(runs, verdicts)}."])
