"""Numbers that agree (issue 22, part 8) on a real one-process run: nothing is
communicated, so no part of the breakdown is 'comm'; the intervals that traced are
flagged; the summary's samples/s and the report's are one figure."""
import glob
import json

import pytest
from absl import logging as absl_logging


tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop, report  # noqa: E402


def _run(tmp_path, max_steps, log_every):
    run_dir = tmp_path / "run"
    summary = loop.run(cfg.RunConfig(
        train=cfg.TrainConfig(max_steps=max_steps, log_every=log_every, eval_every_epochs=0),
        runtime=cfg.RuntimeConfig(backend="local"),
        observe=cfg.ObserveConfig(run_dir=str(run_dir), baseline_cache="", progress="lines")))
    records = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    return run_dir, summary, [r for r in records if r["kind"] == "train"]


def test_one_process_shows_no_comm_and_one_throughput(tmp_path, caplog):
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)  # the done line is an INFO line
    try:
        run_dir, summary, train = _run(tmp_path, max_steps=40, log_every=10)
    finally:
        absl_logging.set_verbosity(verbosity)
    for r in train:
        assert "comm" not in r["seconds_per_step"], r["seconds_per_step"]
        assert sum(r["seconds_per_step"].values()) == pytest.approx(r["step_s"])
    assert {"compute", "optimizer"} <= set(train[-1]["seconds_per_step"])
    events = glob.glob(str(run_dir / "tb" / "events.out.tfevents.*"))
    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0]) for v in e.summary.value}
    assert "breakdown/compute_ms" in tags and "breakdown/comm_ms" not in tags

    # Step 1 traces the fused step, step 10 the first timed split: interval 1 only.
    assert [r["traced"] for r in train] == [True, False, False, False]
    run = report.load_run(str(run_dir))
    row = report.table_rows([run])[0]
    assert "comm %" not in row
    assert row["samples/s"] == pytest.approx(summary["samples_per_sec"], rel=1e-9)
    done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("done  |")]
    shown = report.format_table([row]).splitlines()[2].split()[3]  # the samples/s cell
    assert done and f"| {shown} samples/s |" in done[0], (done, shown)
    steady = [r["samples_per_sec"] for r in train[1:]]
    assert min(steady) <= summary["samples_per_sec"] <= max(steady)


def test_every_interval_that_traced_is_flagged(tmp_path):
    """log_every=1: steps 1 and 2 run split (the first traces), step 3 is the first
    fused call fed from the iterator (a new function: it traces), then none trace."""
    _, summary, train = _run(tmp_path, max_steps=6, log_every=1)
    assert [r["traced"] for r in train] == [True, False, True, False, False, False]
    assert summary["samples_per_sec"] > 0
