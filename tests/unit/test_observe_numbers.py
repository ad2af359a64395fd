"""Numbers that agree (issue 22, part 8), the pure parts: one throughput definition for
the summary, the report and the stored baseline; no efficiency for an interval that
traced; no comm share when nothing was communicated. No TF."""
import json
import os

import pytest

from horovod_train import config as cfg
from horovod_train import metrics, report
from horovod_train.observe import observer


def test_throughput_is_samples_over_wall_time_of_the_intervals_that_did_not_trace():
    tally = metrics.Throughput()
    tally.add(640, 10.0, traced=True)  # tracing: 64 samples/s, kept out
    tally.add(640, 1.0, traced=False)
    tally.add(1280, 3.0, traced=False)
    assert tally.rate() == pytest.approx(1920 / 4.0)
    assert (tally.samples, tally.seconds) == (1920, pytest.approx(4.0))


def test_throughput_of_a_run_whose_every_interval_traced_counts_them_all():
    tally = metrics.Throughput()
    assert tally.rate() is None
    tally.add(64, 2.0, traced=True)
    assert tally.rate() == pytest.approx(32.0) and not tally.steady


def _records(rates_per_rank, traced, steps=10):
    return [{"kind": "train", "step": steps * (i + 1), "steps": steps, "traced": t,
             "samples_per_sec": sum(rates), "samples_per_sec_per_rank": rates,
             "seconds_per_step": {"data": 0.01, "compute": 0.09}}
            for i, (rates, t) in enumerate(zip(rates_per_rank, traced))]


def _write_run(path, records, world_size=2, summary=None):
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"kind": "start", "world_size": world_size, "config_key": "k"}) + "\n")
        f.write("".join(json.dumps(r) + "\n" for r in records))
    if summary is not None:
        with open(os.path.join(path, "summary.json"), "w") as f:
            json.dump(summary, f)
    return report.load_run(path)


def test_the_report_counts_what_the_summary_counts(tmp_path):
    """The summary's figure is each rank's samples over its wall time in the intervals
    that did not trace, summed over ranks; the report, reading the same intervals from
    metrics.jsonl, must give the same number (it used to differ by its own average)."""
    rates = [[20.0, 22.0], [500.0, 400.0], [300.0, 200.0], [450.0, 350.0]]
    records = _records(rates, [True, False, False, False])
    per_rank = []
    for rank in range(2):  # what every rank's trainer tallies, batch 64 per rank
        tally = metrics.Throughput()
        for r in records:
            samples = 64 * r["steps"]
            tally.add(samples, samples / r["samples_per_sec_per_rank"][rank], r["traced"])
        per_rank.append(tally.rate())
    run = _write_run(str(tmp_path / "run"), records)
    assert report.throughput(run) == pytest.approx(sum(per_rank), rel=1e-12)
    row = report.table_rows([run])[0]
    assert row["samples/s"] == pytest.approx(sum(per_rank), rel=1e-12)


def test_records_without_the_traced_flag_read_their_first_interval_as_traced(tmp_path):
    records = _records([[10.0], [100.0], [100.0]], [None, None, None])
    for r in records:
        del r["traced"]
    run = _write_run(str(tmp_path / "old"), records, world_size=1)
    assert report.throughput(run) == pytest.approx(100.0)


def test_the_report_has_no_comm_column_for_a_run_that_communicated_nothing(tmp_path):
    run = _write_run(str(tmp_path / "one"), _records([[50.0], [60.0]], [True, False]), 1)
    row = report.table_rows([run])[0]
    assert "comm %" not in row and row["compute %"] == pytest.approx(90.0)


@pytest.mark.parametrize("written_as", ["divergence", "guard"])  # "guard": older runs
def test_the_report_keeps_the_divergence_part(tmp_path, written_as):
    records = _records([[50.0], [60.0]], [True, False])
    records[1]["seconds_per_step"][written_as] = 0.1
    row = report.table_rows([_write_run(str(tmp_path / "g"), records, 1)])[0]
    assert row["divergence %"] == pytest.approx(50.0) and "guard %" not in row
    assert sum(v for k, v in row.items() if k.endswith(" %") and k != "efficiency %") == \
        pytest.approx(100.0)


class _Sink:
    """Stands in for the background writer: keeps what would be written."""

    def __init__(self):
        self.written = []

    def submit(self, fn, record, scalars):
        self.written.append((record, scalars))


def _observer(world_size=2):
    config = cfg.RunConfig(observe=cfg.ObserveConfig(baseline_samples_per_sec=100.0,
                                                     progress="lines", baseline_cache=""))
    obs = observer.ChiefObserver(config, world_size, 40, {})
    obs._jsonl, obs._writer = True, _Sink()
    lines = []
    obs.progress.line = lambda text, *args, **kwargs: lines.append(text)
    return obs, lines


def _interval(step, traced, rate=180.0):
    return {"step": step, "total_steps": 40, "steps": 10, "loss": 1.0, "traced": traced,
            "samples_per_sec": rate, "samples_per_sec_per_rank": [rate / 2] * 2,
            "seconds_per_step": {"data": 0.01, "compute": 0.05, "comm": 0.04}}


def test_an_interval_that_traced_shows_and_records_no_efficiency():
    obs, lines = _observer()
    obs.interval(_interval(10, traced=True, rate=2.0))
    obs.interval(_interval(20, traced=False))
    (first, first_scalars), (second, second_scalars) = obs._writer.written
    assert first["efficiency"] is None and first_scalars["throughput/efficiency"] is None
    assert "efficiency" not in lines[0] and "tracing" in lines[0]
    assert second["efficiency"] == pytest.approx(0.9)
    assert second_scalars["throughput/efficiency"] == pytest.approx(0.9)
    assert "efficiency 90%" in lines[1] and "tracing" not in lines[1]


def test_the_log_line_says_an_interval_traced():
    line = metrics.format_line(10, 40, 1.0, 12.0, {"data": 0.5, "compute": 0.5}, traced=True)
    assert line.startswith("train | step 10/40 | loss 1.0000 | 12 samples/s (includes tracing) |")


def test_cpu_seconds_follow_the_steady_intervals():
    tally = metrics.Throughput()
    tally.add(100, 1.0, traced=True, cpu_s=9.0)
    assert tally.cpu_s == 9.0  # every interval traced: they all count, as samples do
    tally.add(200, 2.0, traced=False, cpu_s=3.0)
    tally.add(200, 2.0, traced=False, cpu_s=5.0)
    assert (tally.samples, tally.cpu_s) == (400, 8.0)


def test_the_meter_counts_this_process_cpu_without_what_was_excluded():
    meter = metrics.IntervalMeter()
    busy = metrics.process_cpu_s() + 0.2
    while metrics.process_cpu_s() < busy:  # burn 0.2 s of CPU in the interval
        sum(range(1000))
    counted = meter.cpu()
    assert 0.19 <= counted < 5.0
    wall, cpu = metrics.time.perf_counter(), metrics.process_cpu_s()
    busy = cpu + 0.3
    while metrics.process_cpu_s() < busy:  # an "evaluation": off the interval
        sum(range(1000))
    meter.exclude(wall, cpu)
    assert abs(meter.cpu() - counted) < 0.05 and meter.excluded_s > 0.0
