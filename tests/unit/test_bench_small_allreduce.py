"""bench/small_allreduce.py's report: ours beside a baseline build, row for row."""
from bench import small_allreduce as sa


def _summary(us: float, idle: float) -> dict:
    latency = {f"{size}:eager_s": {"median_us": us * (i + 1), "min_us": us, "max_us": us * 3}
               for i, size in enumerate(sa.SIZES)}
    rows = [{"cycle_ms": cycle, "cache": cache, "latency": latency,
             "idle_cpu_per_s_per_rank": [idle, idle / 2]}
            for cycle in (1.0, 5.0) for cache in ("0", "default")]
    return {"controllers": {"gloo": {"env": {}, "rows": rows}}}


def test_the_comparison_pairs_each_default_cache_row_with_the_baselines():
    lines = sa._comparison(_summary(500.0, 0.04), _summary(5000.0, 0.2), "baseline")
    table = "\n".join(lines)
    # one row per cycle with Horovod's default cache, ours first, then the baseline
    assert table.count("gloo") == 2
    assert "500 / 5000" in table and "1000 / 10000" in table and "1500 / 15000" in table
    assert "0.04, 0.02" in table and "0.20, 0.10" in table


def test_the_report_names_both_builds_and_the_target():
    result = {"builds": {"ours": _summary(500.0, 0.04), "baseline": _summary(5000.0, 0.2)},
              "baseline_site": "/tmp/stock"}
    text = sa.report(result)
    assert "== ours Horovod (this venv)" in text and "== baseline Horovod (/tmp/stock)" in text
    assert "ours beside baseline" in text and "target: under 1000 us" in text


def test_the_bound_arm_is_set_beside_ours():
    result = {"builds": {"ours": _summary(3000.0, 0.04), "bound": _summary(400.0, 0.04)},
              "baseline_site": None}
    text = sa.report(result)
    assert "== bound Horovod (this venv, each rank bound to its own core)" in text
    comparison = text[text.index("ours beside bound"):]
    assert "3000 / 400" in comparison and "us ours / bound" in comparison
    assert "bound beside baseline bound" not in text  # no baseline given
