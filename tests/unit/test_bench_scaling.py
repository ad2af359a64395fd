"""Issue 23's CPU-cost figures: the wall/CPU efficiency split (bench/common.py) and the
M2 report's tables (bench/scaling_report.py), on real numbers. No TensorFlow."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common, scaling_report  # noqa: E402


def test_cost_split_sums_to_one_and_reads_waiting_from_wall_below_cpu():
    # 1 rank: 10 img/s at 0.1 CPU-s/img. 2 ranks: 8 img/s per rank at 0.11 CPU-s/img.
    wall, cpu = 8 / 10, 0.10 / 0.11
    split = common.cost_split(wall, cpu)
    assert split["work"] == pytest.approx(0.8)
    assert split["extra_cpu"] == pytest.approx(0.8 * 0.11 / 0.10 - 0.8)  # 0.08
    assert split["waiting"] == pytest.approx(1 - 0.88)  # 0.12
    assert sum(split.values()) == pytest.approx(1.0)
    # No extra CPU at all: every lost share is waiting.
    assert common.cost_split(0.7, 1.0) == pytest.approx(
        {"work": 0.7, "extra_cpu": 0.0, "waiting": 0.3})
    assert math.isnan(common.cost_split(0.9, float("nan"))["waiting"])


def test_efficiency_is_ratio_of_means_with_per_repeat_ranges():
    one = [{"rate": 10.0, "cpu": 0.100}, {"rate": 12.0, "cpu": 0.100}]
    many = [{"rate": 9.0, "cpu": 0.125}, {"rate": 9.0, "cpu": 0.100}]
    eff = common.efficiency(one, many)
    assert eff["wall"] == pytest.approx(9 / 11)
    assert eff["wall_range"] == pytest.approx([0.75, 0.9])
    assert eff["cpu"] == pytest.approx(0.1 / 0.1125)
    assert eff["cpu_range"] == pytest.approx([0.8, 1.0])
    assert eff["repeats"] == 2
    assert eff["work"] + eff["extra_cpu"] + eff["waiting"] == pytest.approx(1.0)


def test_interpretation_is_derived_from_the_numbers():
    waiting = common.interpret(common.cost_split(0.70, 0.98))
    assert waiting.startswith("70% the 1-rank work, +1% extra CPU work, +29% waiting")
    assert "loss of 30% is mostly waiting" in waiting
    cpu = common.interpret(common.cost_split(0.80, 0.82))
    assert "mostly extra CPU work" in cpu
    hidden = common.interpret(common.cost_split(0.90, 0.80))  # wall above CPU efficiency
    assert "-12% waiting" in hidden and "no waiting" in hidden
    assert common.interpret(common.cost_split(0.99, 0.99)).endswith("no measurable loss")
    assert common.interpret(common.cost_split(0.9, float("nan"))).startswith("no split")


def test_fmt_range():
    assert common.fmt_range([0.95, 0.91, 0.93], digits=3) == "0.910..0.950"
    assert common.fmt_range([0.0123, 0.0150], scale=1e3, digits=1) == "12.3..15.0"
    assert common.fmt_range([None]) == "-" and common.fmt_range([]) == "-"


def _run(rate, cpu, ranks=2, comm=()):
    return {"rate": rate, "cpu": cpu, "ranks": ranks, "comm_share": list(comm),
            "chosen_env": True, "load_after": [2.0, 2.1, 2.2]}


def _figures():
    """Two repeats of resnet18_cifar as scaling.measure stores them (numbers of the
    shape a 2-core host gives: ~5 img/s per rank, ~0.2 CPU-s per image)."""
    reps = [{"ours/1": _run(5.0, 0.20, 1), "bare/1": _run(5.2, 0.19, 1),
             "ours/2/gloo": _run(4.8, 0.205, comm=[float("nan"), 0.06, 0.06]),
             "ours/2/mpi": _run(4.5, 0.21), "bare/2/gloo": _run(4.0, 0.21),
             "bare/2/mpi": _run(3.9, 0.22), "mwms/2": _run(3.0, 0.25),
             "ours/2/gloo/bucket0": _run(4.6, 0.204, comm=[0.08])}
            for _ in range(2)]
    reps[1]["ours/2/gloo"] = _run(4.9, 0.2, comm=[0.05])
    eff = {name: common.efficiency([r[one] for r in reps], [r[two] for r in reps])
           for name, (one, two) in {
               "ours/gloo": ("ours/1", "ours/2/gloo"), "ours/mpi": ("ours/1", "ours/2/mpi"),
               "bare/gloo": ("bare/1", "bare/2/gloo"), "bare/mpi": ("bare/1", "bare/2/mpi"),
               "mwms": ("ours/1", "mwms/2"),
               "ours/gloo/bucket0": ("ours/1", "ours/2/gloo/bucket0")}.items()}
    fig = {"runs": reps, "efficiency": eff, "target": 0.93, "batch": 32, "interval": 3,
           "steps": 15, "horovod_over_mwms": 1.6, "ours_chose_defaults": True}
    return {"models": {"resnet18_cifar": fig}, "version": "short", "repeats": 2,
            "full_repeats": 3}


def test_report_prints_wall_and_cpu_with_ranges_verdicts_and_overlap():
    r = _figures()
    text = scaling_report.report(r, {"ours/1": "ours, 1 rank"})
    assert "2 interleaved repeat(s) (short version: fewer than the full version's 3)" in text
    assert "figures from the 12 steps after the first interval" in text
    # ours Gloo: wall 4.85 / 5.0 = 0.970 (per repeat 0.96..0.98); CPU 0.2 / 0.2025 = 0.988.
    row = next(line for line in text.splitlines() if line.startswith("ours, Gloo  "))
    assert "0.970" in row and "0.960..0.980" in row and "0.988" in row
    assert "target ours >= 0.93 (wall clock): Gloo 0.970 met, MPI 0.900 MISSED" in text
    assert "ours, Gloo: 97% the 1-rank work" in text
    overlap = text[text.index("M2 overlap"):]
    assert "--allreduce_bucket_mb=4 (default)" in overlap and "--allreduce_bucket_mb=0" in overlap
    assert "6%" in overlap and "8%" in overlap  # mean comm shares (the NaN left out)
    assert "buckets / one call: wall efficiency x1.054" in overlap


def test_overlap_reads_explicit_buckets_beside_the_unset_default():
    """Since Gloo on shared CPU cores defaults to one call, the overlap run passes
    --allreduce_bucket_mb=4 and is compared with the default run; earlier results (an
    explicit 0 beside bucketed defaults) still read as before (test above)."""
    r = _figures()
    fig = r["models"]["resnet18_cifar"]
    for rep in fig["runs"]:
        rep["ours/2/gloo/bucket4"] = rep.pop("ours/2/gloo/bucket0")
    fig["efficiency"]["ours/gloo/bucket4"] = fig["efficiency"].pop("ours/gloo/bucket0")
    assert scaling_report.overlap_arms(fig["efficiency"])[0][1] == "ours/gloo/bucket4"
    overlap = scaling_report.report(r, {})[scaling_report.report(r, {}).index("M2 overlap"):]
    assert "--allreduce_bucket_mb=4 " in overlap and "unset (default: one call)" in overlap
    assert "buckets / one call: wall efficiency x0.948" in overlap  # 4.6 / 4.85, the inverse above
    del fig["efficiency"]["ours/gloo/bucket4"]
    assert scaling_report.overlap_arms(fig["efficiency"]) is None
    assert "M2 overlap" not in scaling_report.report(r, {})


def test_rate_rows_show_cpu_milliseconds_and_load():
    rows = scaling_report.rate_rows(_figures()["models"]["resnet18_cifar"]["runs"],
                                    {"ours/1": "ours, 1 rank"})
    first = rows[0]
    assert first[:2] == ["ours, 1 rank", 1]
    assert first[2] == "5.00" and first[3] == "5.00..5.00"
    assert first[4] == "200.0" and first[6] == "[2.0, 2.1, 2.2]"
    assert rows[-1][0] == "ours/2/gloo/bucket0"  # no label given: the key


def test_m5_lines_show_cpu_efficiency_ranges_and_the_k1_split():
    from bench import comm
    per_round = {"no_comm": [{"rate": 200.0, "cpu": 0.0050}, {"rate": 180.0, "cpu": 0.0052}],
                 "allreduce": [{"rate": 150.0, "cpu": 0.0060}, {"rate": 170.0, "cpu": 0.0058}]}
    split = common.efficiency(per_round["no_comm"], per_round["allreduce"])
    row = {"k": 1, "collective_ops_per_step": 1, "samples_per_step": 64,
           "samples_per_sec": {"allreduce": 160.0, "no_comm": 190.0},
           "cpu_s_per_sample": {"allreduce": 0.0059, "no_comm": 0.0051},
           "efficiency": split["wall"], "cpu_efficiency": split["cpu"], "split": split}
    text = "\n".join(comm.m5_lines([row]))
    assert "2 interleaved rounds (short version: fewer than the full version's 3)" in text
    # wall 160/190 = 0.842 (rounds 0.750..0.944); CPU 5.1/5.9 = 0.864 (0.833..0.897).
    assert "0.842" in text and "0.750..0.944" in text and "0.864" in text
    assert "0.833..0.897" in text and "5.90" in text and "5.10" in text
    k1 = text.splitlines()[-1]
    assert k1.startswith("k=1 (the step without comm as the 1-rank work): 84% the 1-rank work")
    assert "+13% extra CPU work, +3% waiting" in k1 and "mostly extra CPU work" in k1


def test_a_run_cut_short_says_how_many_repeats_it_completed():
    r = _figures()
    r["repeats"] = 3  # planned 3, measured 2
    text = scaling_report.report(r, {})
    assert "2 interleaved repeat(s) (short version: fewer than the full version's 3); " \
           "a run cut short: 2 of the 3 planned" in text


def test_binding_section_sets_bound_beside_unbound_from_the_same_repeats():
    r = _figures()
    fig = r["models"]["resnet18_cifar"]
    for rep in fig["runs"]:
        rep["ours/2/gloo/unbound"] = _run(4.0, 0.22)
    fig["efficiency"]["ours/gloo/unbound"] = common.efficiency(
        [x["ours/1"] for x in fig["runs"]], [x["ours/2/gloo/unbound"] for x in fig["runs"]])
    text = scaling_report.report(r, {})
    section = text[text.index("M2 CPU binding"):]
    # bound 4.85 / 5.0 = 0.970 against none 4.0 / 5.0 = 0.800: x1.212.
    assert "bound (default)" in section and "0.970" in section and "0.800" in section
    assert "x1.212" in section
    # CPU: bound 0.2 / 0.2025 = 0.988, none 0.2 / 0.22 = 0.909: x1.086.
    assert "x1.086" in section


def test_no_binding_section_without_the_unbound_run():
    assert "M2 CPU binding" not in scaling_report.report(_figures(), {})


def test_the_ceiling_of_two_lone_processes_and_how_much_of_it_ours_reaches():
    r = _figures()
    fig = r["models"]["resnet18_cifar"]
    for rep in fig["runs"]:
        rep["solo/1"], rep["solo/2"] = _run(5.2, 0.19, 1), _run(4.68, 0.20)
    fig["efficiency"]["ceiling"] = common.efficiency(
        [x["solo/1"] for x in fig["runs"]], [x["solo/2"] for x in fig["runs"]])
    text = scaling_report.report(r, {})
    # ceiling: 4.68 / 5.2 = 0.900 wall, 0.19 / 0.20 = 0.950 CPU; ours Gloo 0.970 / 0.900.
    assert "the ceiling here (2 processes that never communicate): wall 0.900, CPU 0.950" in text
    assert "ours, Gloo / ceiling: wall x1.078" in text
    row = next(line for line in text.splitlines() if line.startswith("no communication"))
    assert "0.900" in row and "0.950" in row


def test_a_report_of_some_runs_only_leaves_the_others_out():
    """scaling.py --runs ours/1,ours/2/gloo: no MPI, bare, mwms or ceiling rows."""
    r = _figures()
    fig = r["models"]["resnet18_cifar"]
    keep = {"ours/1", "ours/2/gloo"}
    fig["runs"] = [{k: v for k, v in rep.items() if k in keep} for rep in fig["runs"]]
    fig["efficiency"] = {"ours/gloo": fig["efficiency"]["ours/gloo"]}
    fig["horovod_over_mwms"] = fig["ours_chose_defaults"] = None
    text = scaling_report.report(r, {})
    assert "target ours >= 0.93 (wall clock): Gloo 0.970 met;" in text
    assert "MPI" not in text and "mwms" not in text and "ceiling" not in text
