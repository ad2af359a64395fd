"""The pure parts of observability: progress formatting, efficiency and the baseline
key, the breakdown's arithmetic, the report table, and the config's checks. No TF."""
import json
import os

import pytest

from horovod_train import config as cfg
from horovod_train import metrics, report
from horovod_train.errors import UsageError
from horovod_train.observe import baseline, progress


def test_eta_and_bar_formatting():
    assert progress.format_eta(None) == "?" and progress.format_eta(float("nan")) == "?"
    assert progress.format_eta(45) == "45s"
    assert progress.format_eta(125) == "2:05"
    assert progress.format_eta(3723) == "1:02:03"
    bar = progress.format_bar(120, 1000, 5230.4, 65, width=10)
    assert bar == "[#.........]  120/1000  12% | 5230 samples/s | eta 1:05"
    assert progress.format_bar(0, 10, None, None, width=4) == "[....]  0/10   0% | - samples/s | eta ?"


def test_efficiency():
    assert baseline.efficiency(1800.0, 2, 1000.0) == pytest.approx(0.9)
    assert baseline.efficiency(1800.0, 2, None) is None
    assert baseline.efficiency(1800.0, 2, 0.0) is None


def test_baseline_key_ignores_world_size_dependent_fields():
    one = cfg.RunConfig(runtime=cfg.RuntimeConfig(backend="local"),
                        train=cfg.TrainConfig(max_steps=10))
    many = cfg.RunConfig(runtime=cfg.RuntimeConfig(backend="horovod", cycle_time_ms=5),
                         train=cfg.TrainConfig(max_steps=500, log_every=7),
                         observe=cfg.ObserveConfig(run_dir="/x"))
    other = cfg.RunConfig(data=cfg.DataConfig(batch_size=64))
    key = baseline.config_key(one.to_dict(), machine="m")
    assert key == baseline.config_key(many.to_dict(), machine="m")
    assert key != baseline.config_key(other.to_dict(), machine="m")
    assert key != baseline.config_key(one.to_dict(), machine="another")


def test_baseline_store_lookup_and_flag_precedence(tmp_path):
    cache = str(tmp_path / "sub" / "cache.json")
    assert baseline.lookup(cache, "k") == (None, None)
    baseline.store(cache, "k", 1234.0, "runs/one")
    assert baseline.lookup(cache, "k") == (1234.0, "runs/one")
    assert baseline.resolve(cfg.ObserveConfig(baseline_cache=cache), "k")[0] == 1234.0
    flagged = cfg.ObserveConfig(baseline_cache=cache, baseline_samples_per_sec=99.0)
    assert baseline.resolve(flagged, "k") == (99.0, "--baseline_samples_per_sec")
    with open(cache, "w") as f:
        f.write("{not json")
    assert baseline.lookup(cache, "k") == (None, None)  # damaged cache: no baseline, no crash


def test_comm_is_what_the_step_waits_beyond_compute_and_update():
    parts = {"compute": 0.06, "comm": 0.03, "optimizer": 0.01}
    # No overlap: the step takes the split's sum, all of comm shows.
    assert metrics.split_step(parts, 0.10) == pytest.approx(parts)
    # Buckets hid 20 of the 30 ms of allreduce: 10 ms stay exposed.
    hidden = metrics.split_step(parts, 0.08)
    assert hidden == pytest.approx({"compute": 0.06, "comm": 0.01, "optimizer": 0.01})
    # Faster than compute and update alone (a noisy sample): no comm, parts scaled down.
    fast = metrics.split_step(parts, 0.035)
    assert fast["comm"] == 0.0 and fast["compute"] == pytest.approx(0.03)
    assert sum(fast.values()) == pytest.approx(0.035)
    # Never more comm than the split measured, the rest in proportion.
    slow = metrics.split_step(parts, 0.20)
    assert slow["comm"] == pytest.approx(0.03) and sum(slow.values()) == pytest.approx(0.20)
    assert metrics.split_step({"compute": 3.0, "optimizer": 1.0}, 0.2) == \
        pytest.approx({"compute": 0.15, "optimizer": 0.05})


def test_breakdown_adds_up_to_the_wall_time_per_step():
    m = metrics.IntervalMeter(started=100.0)
    for _ in range(4):
        m.add(32, data_s=0.01, step_s=0.09, loss=1.0)
    m.excluded_s, m.sync_s = 0.5, 0.02
    per_step = m.seconds_per_step({"compute": 0.06, "comm": 0.02, "optimizer": 0.01}, now=101.0)
    assert sum(per_step.values()) == pytest.approx((1.0 - 0.5) / 4)
    assert per_step["data"] == pytest.approx(0.01)
    assert per_step["compute"] == pytest.approx(0.06)
    assert per_step["sync"] == pytest.approx(0.005)
    assert per_step["other"] == pytest.approx(0.125 - 0.01 - 0.09 - 0.005)
    assert set(m.seconds_per_step(None, 101.0)) == {"data", "step", "sync", "other"}
    assert m.rank_row(101.0) == [1.0, pytest.approx(128 / 0.5)]


def test_log_line_keeps_its_prefix_and_adds_rank_efficiency_eta():
    line = metrics.format_line(120, 1000, 0.412, 5230, {"data": 0.02, "compute": 0.98},
                               per_rank=2615, efficiency=0.93, eta="1:05")
    assert line == ("train | step 120/1000 | loss 0.4120 | 5230 samples/s (2615/rank, "
                    "efficiency 93%) | data 2% compute 98% | eta 1:05")
    assert metrics.format_line(1, 2, 1.0, 10, {}).startswith("train | step 1/2 | loss 1.0000")


def _fake_run(path, world_size, rate, key="k"):
    os.makedirs(path)
    records = [{"kind": "start", "world_size": world_size, "config_key": key}]
    for step in (10, 20, 30):
        records.append({"kind": "train", "step": step, "steps": 10, "time_s": step / 10,
                        "samples_per_sec": rate, "samples_per_sec_per_rank": [rate / world_size] * world_size,
                        "seconds_per_step": {"data": 0.01, "compute": 0.06, "comm": 0.02,
                                             "optimizer": 0.01, "sync": 0.0, "other": 0.0}})
    records.append({"kind": "eval", "step": 30, "accuracy": 0.9, "loss": 0.3})
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(r) for r in records) + "\n{\"cut by a cra")
    return path


def test_report_table_and_scaling_efficiency(tmp_path):
    runs = [report.load_run(_fake_run(str(tmp_path / "r1"), 1, 1000.0)),
            report.load_run(_fake_run(str(tmp_path / "r2"), 2, 1800.0))]
    rows = report.table_rows(runs)
    assert rows[1]["efficiency %"] == pytest.approx(90.0)
    assert rows[1]["per rank"] == pytest.approx(900.0)
    assert rows[0]["comm %"] == pytest.approx(20.0) and rows[0]["accuracy"] == 0.9
    table = report.format_table(rows)
    assert table.splitlines()[0].split()[:4] == ["run", "ranks", "steps", "samples/s"]
    assert "r2" in table and "90.0" in table


def test_report_cli_writes_pngs_and_refuses_a_non_run(tmp_path, capsys):
    _fake_run(str(tmp_path / "a"), 1, 1000.0)
    _fake_run(str(tmp_path / "b"), 2, 1500.0)
    assert report.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    for png in ("a/throughput.png", "a/breakdown.png", "b/breakdown.png", "scaling.png"):
        assert os.path.getsize(tmp_path / png) > 1000
    assert report.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "received" in err and "Fix:" in err and len(err.strip().splitlines()) == 1


def test_observe_config_errors_are_one_line_fixes():
    with pytest.raises(UsageError, match=r"--profile_steps: received '9,3'.*Fix: pass"):
        cfg.ObserveConfig(run_dir="r", profile_steps="9,3")
    with pytest.raises(UsageError, match=r"--horovod_timeline.*--run_dir"):
        cfg.ObserveConfig(horovod_timeline=True)
    with pytest.raises(UsageError, match="--progress"):
        cfg.ObserveConfig(progress="fancy")
    with pytest.raises(UsageError, match="--baseline_samples_per_sec"):
        cfg.ObserveConfig(baseline_samples_per_sec=-1)
    assert cfg.ObserveConfig(run_dir="r", profile_steps="20,25").profile_window() == (20, 25)
    assert cfg.RunConfig(observe=cfg.ObserveConfig(run_dir="r")).summary_path() == "r/summary.json"
    assert cfg.RunConfig(summary_json="s.json").summary_path() == "s.json"


def test_the_divergence_check_is_its_own_part_of_the_breakdown():
    """A check's time is shown as 'divergence' (the flag's and the console's word), not
    left in 'other' (where the parts would no longer add up to the step); intervals
    without a check show no divergence part."""
    from horovod_train.metrics import IntervalMeter
    meter = IntervalMeter(started=0.0)
    meter.add(32, 0.1, 0.5, 1.0)
    assert "divergence" not in meter.seconds_per_step(None, now=0.6)
    meter.divergence_s = 0.3
    parts = meter.seconds_per_step(None, now=0.9)
    assert parts["divergence"] == pytest.approx(0.3) and parts["other"] == pytest.approx(0.0)
    assert sum(parts.values()) == pytest.approx(0.9)
