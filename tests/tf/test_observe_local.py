"""Observability in one process: the records, the TensorBoard scalars, the stored
1-rank baseline, and --noinstrument writing nothing."""
import glob
import json
import os

import pytest


tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop  # noqa: E402
from horovod_train.observe import baseline  # noqa: E402


def _config(tmp_path, **observe):
    return cfg.RunConfig(train=cfg.TrainConfig(max_steps=40, log_every=10, eval_every_epochs=0),
                         runtime=cfg.RuntimeConfig(backend="local"),
                         observe=cfg.ObserveConfig(**observe))


def test_local_run_records_intervals_scalars_and_its_baseline(tmp_path):
    run_dir, cache = tmp_path / "run", str(tmp_path / "cache.json")
    config = _config(tmp_path, run_dir=str(run_dir), baseline_cache=cache)
    summary = loop.run(config)
    assert json.load(open(run_dir / "summary.json"))["steps"] == 40 == summary["steps"]
    records = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["kind"] for r in records] == ["start", "startup"] + ["train"] * 4 + ["eval", "end"]
    # The time to the first step by phase, as summary.json has it.
    assert records[1]["seconds"] == summary["startup_s_per_rank"][0]
    last = records[5]
    # One process communicates nothing: no comm part (test_observe_numbers_local.py).
    assert set(last["seconds_per_step"]) == {"data", "compute", "optimizer", "sync", "other"}
    assert sum(last["seconds_per_step"].values()) == pytest.approx(last["step_s"])
    assert last["learning_rate"] == pytest.approx(0.002) and last["loss_scale"] == 1.0
    assert last["gpu_util_pct"] is None  # no GPU here: nothing recorded, not zeros

    events = glob.glob(str(run_dir / "tb" / "events.out.tfevents.*"))
    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0]) for v in e.summary.value}
    assert {"train/loss", "train/learning_rate", "throughput/samples_per_sec",
            "breakdown/compute_ms", "eval/accuracy"} <= tags
    assert "gpu/utilization_pct" not in tags and "throughput/efficiency" not in tags

    stored, _ = baseline.lookup(cache, baseline.config_key(config.to_dict()))
    steady = [r for r in records if r["kind"] == "train"][1:]
    assert min(r["samples_per_sec"] for r in steady) <= stored <= \
        max(r["samples_per_sec"] for r in steady)


def test_noinstrument_writes_nothing_and_still_logs(tmp_path, caplog):
    cache = tmp_path / "cache.json"
    summary = loop.run(_config(tmp_path, instrument=False, baseline_cache=str(cache)))
    assert summary["steps"] == 40 and not cache.exists() and os.listdir(tmp_path) == []
