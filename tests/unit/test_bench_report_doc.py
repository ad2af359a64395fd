"""docs/benchmarks.md's rendered tables are the kept results' (python bench/report_doc.py
doc writes them), and each table function reads a result the way its script writes it:
made-up results here, of the scripts' own shapes (bench/scaling.figures builds M2's)."""
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import doc_tables, doc_tables_comm, doc_targets, report_doc, scaling  # noqa: E402

RUN = {"short": False, "load_before": [0.5, 0.6, 0.7], "load_after": [1.5, 1.0, 0.9],
       "seconds": 1234.5, "machine": {"Model name": "AMD EPYC", "cpus": 2, "Flags": "fma avx2"}}


def test_docs_benchmarks_md_is_its_rendering():
    doc = (REPO / "docs" / "benchmarks.md").read_text()
    assert report_doc.render(doc) == doc, "docs/benchmarks.md is stale: run python bench/report_doc.py doc"


def test_every_block_renders_from_a_kept_result():
    kept = {path.stem for path in (REPO / "docs" / "bench-results").glob("*.json")}
    assert report_doc.BLOCKS and kept
    for name, table in {**report_doc.BLOCKS, **report_doc.DATA_BLOCKS}.items():
        assert table().count("\n| ") >= 2, name  # a table with rows, not an empty block


def test_render_refuses_a_block_without_markers():
    with pytest.raises(SystemExit, match="no '<!-- begin t -->' marker"):
        report_doc.render("text", {"t": lambda: "| a |"})
    with pytest.raises(SystemExit, match="has no '<!-- end t -->'"):
        report_doc.render("<!-- begin t -->\nold", {"t": lambda: "| a |"})
    doc = "head\n<!-- begin t -->\nold\n<!-- end t -->\ntail"
    assert report_doc.render(doc, {"t": lambda: "new"}) == "head\n<!-- begin t -->\nnew\n<!-- end t -->\ntail"


def test_keep_drops_the_samples_and_the_machines_extras(tmp_path, monkeypatch):
    result = {**RUN, "rounds": 3, "models": [{"model": "m", "plain_s": 0.1, "plain_blocks_s": [0.1] * 50}],
              "machine": {**RUN["machine"], "Socket(s)": "1", "load_average": [1, 2, 3]}}
    (tmp_path / "xla.json").write_text(json.dumps(result))
    monkeypatch.setattr(report_doc, "KEPT", str(tmp_path / "kept"))
    path = report_doc.keep("xla", "xla_hostc", str(tmp_path))
    assert os.path.basename(path) == "xla_hostc.json"
    kept = json.loads(Path(path).read_text())
    assert kept["models"] == [{"model": "m", "plain_s": 0.1}] and kept["rounds"] == 3
    assert kept["machine"] == RUN["machine"]
    with pytest.raises(SystemExit, match="does not exist"):
        report_doc.keep("nothing", in_dir=str(tmp_path))


def test_conditions_name_the_host_version_and_load():
    line = doc_tables.conditions({**RUN, "machine": {**RUN["machine"], "Flags": "avx2 avx512f"}})
    assert line == ("*AMD EPYC, 2 CPUs, AVX-512; the full version; load 0.5 -> 1.5 "
                    "(1-minute average); 1,234 s.*")


def _run(rate, cpu, ranks=2, comm=()):
    return {"rate": rate, "cpu": cpu, "ranks": ranks, "comm_share": list(comm),
            "chosen_env": True, "load_after": [2.0, 2.1, 2.2]}


def _m2():
    """scaling.figures over two made-up repeats of both models, every run of a full round."""
    def rep(slower):
        return {"ours/1": _run(5.0, 0.20, 1), "bare/1": _run(5.2, 0.19, 1),
                "solo/1": _run(5.5, 0.19, 1), "solo/2": _run(5.2, 0.195),
                "ours/2/gloo": _run(4.8 - slower, 0.205, comm=[0.05]), "ours/2/mpi": _run(4.5, 0.21),
                "bare/2/gloo": _run(4.0, 0.21), "bare/2/mpi": _run(3.9, 0.22),
                "mwms/2": _run(3.0, 0.25), "ours/2/gloo/bucket4": _run(4.0, 0.23, comm=[0.01]),
                "ours/2/gloo/unbound": _run(4.4, 0.2)}
    reps = {m.name: [rep(0.0), rep(0.2)] for m in scaling.MODELS}
    return {**scaling.figures(reps, "short"), **RUN}


def test_m2_efficiency_rows_split_and_one_rank_rates():
    text = doc_tables.m2_efficiency(_m2(), "resnet18_cifar")
    # ours Gloo: 4.7 / 5.0 = 0.940 (repeats 0.92-0.96); CPU 0.2 / 0.205 = 0.976.
    assert "| **ours, Gloo** | 0.940 (0.920-0.960) | 0.976 (0.976-0.976) | 94% | +2% | +4% |" in text
    assert "| ceiling: 2 processes, no communication | 0.945 (0.945-0.945) |" in text
    assert "; the full version; 2 interleaved repeats; load 2-2 after its runs; load 0.5 -> 1.5" in text
    assert text.endswith("1 rank: ours 5.00 img/s (5.00-5.00), bare Horovod loop 5.20 img/s "
                         "(5.20-5.20), ours with `--backend=local` 5.50 img/s (5.50-5.50).")


def test_m2_overlap_and_binding():
    r = _m2()
    overlap = doc_tables.m2_overlap(r, "resnet18_cifar")
    # buckets 4.0 img/s per rank at batch 32: 8.00 s/step; one call 4.7: 6.81.
    assert "| `--allreduce_bucket_mb=4` | 0.800 (0.800-0.800) |" in overlap
    assert "| 1% | 8.00 |" in overlap and "| 5% | 6.81 |" in overlap
    assert "Buckets / one call: x0.851 in wall clock" in overlap
    binding = doc_tables.m2_binding(r)
    assert "| digits_cnn | 0.940 (0.920-0.960) | 0.880 (0.880-0.880) | x1.068 | 0.976 / 1.000 |" in binding


def test_m1_rounds_and_ratios():
    runs = {"ours": [{"per_rank": [240, 250]}, {"per_rank": [280]}],
            "keras_fit": [{"per_rank": [270]}, {"per_rank": [290]}],
            "keras_fit_pooled": [{"per_rank": [300]}, {"per_rank": [300]}]}
    r = {**RUN, "runs": runs, "target": 1.02, "step_time_ratio": 1.047,
         "step_time_ratio_pooled": 1.095,
         "merged": {k: {"per_rank": [x for run in v for x in run["per_rank"]]} for k, v in runs.items()}}
    text = doc_tables.m1_overhead(r)
    assert "| ours (horovod_train, local) | 245, 280 | 256.7 +- " in text
    # round 1: fit 270 / ours 245 = 1.10 in step time; round 2: 290 / 280 = 1.04.
    assert ("ours / fit = **1.047**, **missed** (round by round 1.10, 1.04); ours / fit with "
            "the same allocator = 1.095, **missed**; target <= 1.02.") in text
    assert "; 2 interleaved rounds; load" in text


def _comm(scale):
    sizes = [4 << 10, 1 << 20, 16 << 20]
    m3 = [{"bytes": b, "ours_s": scale * b / 1e9 + 1e-4, "bare_mpi4py_s": b / 1e9 + 1e-5,
           "mpi4py_s": 2e-3, "ratio": 0.5 * scale} for b in sizes]
    split = {"wall_range": [0.9, 1.1], "cpu_range": [0.8, 1.0]}
    m4 = {"tensors": 128, "tensor_bytes": 16 << 10, "grouped_over_mpi4py": 1.1 * scale,
          "seconds": {key: 0.001 * scale for key in doc_tables_comm.M4_ROWS},
          "bare_seconds": {key: 0.002 for key in doc_tables_comm.M4_ALONE}}
    return {**RUN, "m3": m3, "m3_gloo": [{"ours_s": 3 * x["ours_s"]} for x in m3], "m4": m4,
            "m5": [{"k": 1, "collective_ops_per_step": 2, "efficiency": 0.952,
                    "cpu_efficiency": 0.913, "split": split}]}


def test_comm_tables_set_runs_side_by_side():
    runs = [_comm(1.0), _comm(2.0)]
    small = doc_tables_comm.small_allreduce(runs)
    assert ("| size | run 1: MPI | run 1: Gloo | run 2: MPI | run 2: Gloo | "
            "mpi4py alone (run 1, run 2) |") in small
    assert "| 4 KiB | 104 | 312 | 108 | 325 | 14, 14 |" in small and "16 MiB" not in small
    assert small.startswith("*run 1: AMD EPYC") and "\n\n*run 2: AMD EPYC" in small
    assert ("| 16 MiB | 16,877 | 16,787 | 2,000 | 0.50 | 33,654 | 16,787 | 2,000 | 1.00 |"
            in doc_tables_comm.m3(runs))
    m4 = doc_tables_comm.m4(runs)
    assert "| Horovod `grouped_allreduce` (what a Horovod user calls) | 1.00 | 2.00 |" in m4
    assert "| **mpi4py one buffer, alone** | 2.00 | 2.00 |" in m4
    assert "(target <= 2): 1.10 met (run 1), 2.20 **missed** (run 2)." in m4
    m5 = doc_tables_comm.m5(runs)
    assert "| 1 | 2 | 0.952 (0.900-1.100) | 0.913 (0.800-1.000) | 0.952 (0.900-1.100) |" in m5
    assert "(target >= 0.95): 0.952 met (run 1), 0.952 met (run 2)." in m5
    # 1 MiB: 1,048,576 / 1e9 + 1e-4 s = 1,149 us under MPI, 3x that under Gloo.
    assert ("Target <= 1000 us under both controllers: **missed**: 1 MiB MPI (1,149 us), "
            "1 MiB Gloo (3,446 us) (run 1), **missed**: ") in small
    assert ("16 MiB 0.50 **missed**, 16 MiB 1.00 met" not in doc_tables_comm.m3(runs)
            and "from 16 MiB up: 16 MiB 0.50 **missed** (run 1), 16 MiB 1.00 met (run 2)."
            in doc_tables_comm.m3(runs))


def test_comm_tables_of_one_run_name_no_runs():
    small, m4 = doc_tables_comm.small_allreduce([_comm(1.0)]), doc_tables_comm.m4([_comm(1.0)])
    assert small.startswith("*AMD EPYC") and "run 1" not in small + m4
    assert "| size | MPI | Gloo | mpi4py alone |" in small and "| how | ms |" in m4
    assert "(target <= 2): 1.10 met." in m4


def test_m6_xla_tables():
    case = {"case": "digits TFRecord (4 files) -> digits_cnn", "pipeline": 115482.0,
            "consumer": 4828.0, "headroom": 23.92, "data_wait": 0.016, "floor_wait": 0.015}
    assert ("| digits TFRecord (4 files) -> digits_cnn | 115,482 | 4,828 | 23.9x | 1.6% | 1.5% |"
            in doc_tables.m6_input({**RUN, "cases": [case]}))
    ab = [{"variant": v, "data_wait": w, "floor_wait": 0.014, "ms_per_step": 7.5,
           "cpu_ms_per_step": 11.9, "load": 2.0} for v, w in (("before", 0.026), ("before", 0.031),
                                                             ("after", 0.017), ("after", 0.015))]
    text = doc_tables.m6_ab({**RUN, "cases": ab})
    assert "| before | 2 | 2.9% [2.6%, 3.1%] | 1.4% [1.4%, 1.4%] | 7.50 [7.50, 7.50] |" in text
    assert "load" not in text.split("\n\n")[1]
    xla = {"model": "digits_cnn", "batch": 64, "plain_s": 0.0582, "xla_s": 0.1139, "ratio": 1.957}
    assert "| digits_cnn | 64 | 58.2 | 113.9 | 1.96 |" in doc_tables.xla({**RUN, "models": [xla]})


def test_epochs_memory_lists_rounds_in_order_and_verdicts():
    arm = lambda e, s: {"epochs": e, "steps": s, "first_step_s": [6.0, 6.1],  # noqa: E731
                        "peak_rss_mb": [714.4, 790.0], "wall_s": 3.0}
    r = {**RUN, "arms": {"epochs=1": [arm(1, 22)] * 2, "epochs=40": [arm(40, 880)] * 2},
         "target": 1.1, "rss_ratio": 1.2, "first_step_ratio": 0.95}
    rows = [line for line in doc_tables.epochs_memory(r).splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[:2] for row in rows[1:5]] == [["| 1", "`--epochs=1`"], ["| 1", "`--epochs=40`"],
                                                            ["| 2", "`--epochs=1`"], ["| 2", "`--epochs=40`"]]
    assert "| 1 | `--epochs=40` | 880 | 6.0 / 6.1 | 714 / 790 | 3.0 |" in rows
    assert "| peak RSS | 1.200 | <= 1.1 | **missed** |" in rows



def _guards_and_tape():
    trainer = {**RUN, "rounds": 5, "ranks": 2, "target": 1.01, "models": [
        {"model": "digits_cnn", "params": 2117962, "batch": 64, "step_s": 0.055, "check_s": 0.004,
         "steps_per_epoch": 11, "epoch_ratio": 1.0066, "steps_for_1pct": 8}]}
    keras = {**RUN, "target": 0.01, "rows": [
        {"model": "digits_cnn", "step_ms": 44.9, "in_step_check_ms": 9.84, "epoch_check_ms": 4.1,
         "steps_per_epoch": 22, "overhead": 0.00113}]}
    tape = {**RUN, "target": 1.02, "rows": [
        {"model": "digits_cnn", "controller": "mpi", "buckets": "one call", "tape_ms": 33.1,
         "hand_ms": 33.0, "ratio": 1.003, "round_ratios": [0.96, 1.03]},
        {"model": "digits_cnn", "controller": "mpi", "buckets": "the backend's rule",
         "tape_ms": 32.1, "hand_ms": 29.3, "ratio": 1.098, "round_ratios": [1.08, 1.11]}]}
    return trainer, keras, tape


def test_guard_and_tape_tables_with_verdicts():
    trainer, keras, tape = _guards_and_tape()
    text = doc_tables.divergence_overhead(trainer)
    assert "| digits_cnn | 2,117,962 | 64 | 55.0 | 4.000 | 11 | 1.00660 | 8 |" in text
    assert text.endswith("worst model: 1.00660, met; target <= 1.01.")
    void = doc_tables.divergence_overhead({**trainer, "models": [{**trainer["models"][0], "check_s": 1e-7}]})
    assert "**Void**: the check of digits_cnn took under 10 us" in void and "met" not in void
    text = doc_tables.keras_guard_overhead(keras)
    assert "| digits_cnn | 44.9 | 9.84 | 4.1 | 22 | 0.113% |" in text
    assert text.endswith("Worst model: 0.113% of step time, met; target <= 1%.")
    text = doc_tables.tape_overhead(tape)
    assert "| digits_cnn | mpi | one call | 33.1 | 33.0 | 1.003 | 0.96-1.03 | met |" in text
    assert "| 1.098 | 1.08-1.11 | **missed** |" in text


def test_targets_summarise_the_kept_results_they_are_given():
    trainer, keras, tape = _guards_and_tape()
    text = doc_targets.targets({"m2_scaling": _m2(), "comm": _comm(1.0), "tape_overhead": tape,
                                "divergence_overhead": trainer, "keras_guard_overhead": keras,
                                "m1_overhead": None})
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert any("M2 efficiency, resnet18_cifar, Gloo" in row and "| 0.940 (0.920-0.960), CPU 0.976 |"
               in row and "bare Horovod loop 0.769; ceiling 0.945 | met |" in row for row in rows)
    assert any("M2 efficiency, resnet18_cifar, MPI" in row and row.endswith("| **missed** |")
               for row in rows)
    assert any("one allreduce in a step, MPI, 4 KiB / 1 MiB" in row and "| 104 us / 1,149 us |" in row
               and row.endswith("| **missed** in 1 of 2 sizes |") for row in rows)
    assert any("M3 ours / mpi4py alone, 16 MiB" in row and "| 0.50 |" in row
               and row.endswith("| **missed** |") for row in rows)
    assert any("hand-written" in row and "1.003-1.098 (worst: digits_cnn, mpi, the backend's rule)"
               in row and row.endswith("| **missed** in 1 of 2 cases |") for row in rows)
    assert not any("M1" in row for row in rows)  # not kept: no row
    assert len(rows) == 4 + 2 + 3 + 1 + 2  # M2 (2 models x 2), small (2), M3-M5, tape, guards


def _data_scale():
    """bench/data_scale.py's result, made up; keys in sorted order, as a kept one has them."""
    def load(load_s):
        return {"load_s": load_s, "plan_s": {"8": 0.003, "64": 0.004}, "files": 10100,
                "records": 40400, "parse_s": 0.002, "stat_s": 0.05, "memory_s": 0.04}
    convert = lambda kind, n, mb: {"kind": kind, "records": n, "written": n, "seconds": 5.0,  # noqa: E731
                                   "peak_rss_mb": mb, "progress_lines": 4,
                                   "carriage_returns": False}
    run = lambda mb: {"seconds": 9.0, "peak_rss_mb": mb, "predictions": 5443}  # noqa: E731
    return {**RUN, "target_start_s": 5.0, "growth_flat": 1.1, "workers": [8, 64],
            "startup": {"4 records a file": {"bytes": 4_565_200, "write_s": 6.0, "states": {
                "cold": load(6.2), "remembered": load(0.4), "sizes only": load(0.05)}}},
            "conversion": {f"{k} {n}": convert(k, n, mb) for k, n, mb in (
                ("images", 10000, 640), ("images", 100000, 650), ("npz", 10000, 650),
                ("npz", 100000, 780), ("text", 10000, 640), ("text", 100000, 655))},
            "evaluation": {
                "2048 MB": {"eval_bytes": 2_149_680_192, "eval_records": 174176, "write_s": 13,
                            "runs": {"--cache=memory": run(900.0), "plain": run(1000.0)}},
                "320 MB": {"eval_bytes": 335_887_530, "eval_records": 27215, "write_s": 3,
                           "runs": {"plain": run(880.0)}}}}


def test_data_scale_tables_order_by_size_and_take_the_scripts_verdicts():
    from bench import data_scale, doc_tables_data
    r = _data_scale()
    text = doc_tables_data.data_scale_tables(r)
    assert "| 10,100 files, 4 records a file | cold | 6.20 | 3.0 | 4.0 | 6.20 | **missed** |" in text
    assert "| 10,100 files, 4 records a file | sizes only | 0.05 | 3.0 | 4.0 | 0.05 | met |" in text
    assert "images x1.016 (+10 MiB), npz x1.200 (+130 MiB), text x1.023 (+15 MiB)" in text
    evals = [line for line in text.splitlines() if " GB |" in line]
    assert [line.split(" | ")[2] for line in evals] == ["plain", "plain", "`--cache=memory`"]
    assert "largest split / smallest: 1.136 (target <= 1.1: **missed**)" in text
    rows = doc_targets.targets({"data_scale": r}).splitlines()[2:]
    assert [row.rsplit(" | ", 1)[1] for row in rows] == ["**missed** |", "met |", "**missed** |"]
    assert "cold 6.20 s, remembered 0.40 s, sizes only 0.05 s" in rows[0]
    assert "Datasets of real shape" in data_scale.report(r)


def test_docs_data_md_is_its_rendering():
    doc = (REPO / "docs" / "data.md").read_text()
    assert report_doc.render(doc, path=report_doc.DATA_DOC) == doc, \
        "docs/data.md is stale: run python bench/report_doc.py doc"


def test_doc_leaves_every_page_whole_when_a_block_cannot_render(tmp_path, monkeypatch):
    """`doc` with a result not kept used to open the page for writing first: it was left
    empty."""
    page = tmp_path / "page.md"
    page.write_text("head\n<!-- begin t -->\nold\n<!-- end t -->\n")
    monkeypatch.setattr(report_doc, "PAGES", {str(page): {"t": lambda: report_doc.kept("none")}})
    monkeypatch.setattr(report_doc, "KEPT", str(tmp_path))
    with pytest.raises(SystemExit, match="none.json, which does not exist"):
        report_doc.main(["doc"])
    assert page.read_text() == "head\n<!-- begin t -->\nold\n<!-- end t -->\n"
