"""TF-free data pieces: read plans for file-backed sources, dataset.json, data options."""
import io
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from horovod_train import config as cfg
from horovod_train.data import schema as schema_lib
from horovod_train.data import sharding
from horovod_train.errors import UsageError

COUNTS = [[26, 26, 26, 25], [103], [17, 17, 17, 17, 17, 18], [50, 3, 3, 3, 44], [0, 0, 9, 9],
          [5, 5]]


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("batch", [1, 4, 5])
def test_every_worker_holds_a_full_epoch_and_files_are_disjoint(counts, world, batch):
    plans = [sharding.plan_train_read(counts, sharding.ShardInfo(r, world), batch)
             for r in range(world)]
    need = sharding.steps_per_epoch(sum(counts), batch, world) * batch
    assert all(p.records >= need for p in plans)  # no rank runs out before the others
    assert len({p.mode for p in plans}) == 1  # every rank takes the same decision
    assert sum(p.records for p in plans) == sum(counts)  # together: every record once
    if plans[0].mode == "file":
        files = [f for p in plans for f in p.files]
        assert sorted(files) == list(range(len(counts)))


def test_file_level_only_with_enough_files_and_balance():
    assert sharding.plan_train_read([26, 26, 26, 25], sharding.ShardInfo(0, 4), 5).mode == "file"
    assert sharding.plan_train_read([103], sharding.ShardInfo(0, 2), 5).mode == "record"
    assert sharding.plan_train_read([26, 26, 26, 25], sharding.ShardInfo(0, 3), 5).mode == \
        "record"  # dealt 52/26/25, but 30 needed each
    assert sharding.plan_eval_read([26, 26, 26, 25], sharding.ShardInfo(2, 3)).mode == "file"


def test_deal_files_is_deterministic_balanced_and_spreads_empty_files():
    assert sharding.deal_files([10, 1, 9, 2], 2) == [[0, 1], [2, 3]]
    assert sharding.deal_files([0, 0, 0], 3) == [[0], [1], [2]]
    assert sharding.round_robin(5, 2) == [[0, 2, 4], [1, 3]]


def _deal_by_rule(counts, count):
    """The deal's rule spelled out: each file, largest first, to the worker with the
    least load, then the fewest files, then the lowest index."""
    loads, dealt = [0] * count, [[] for _ in range(count)]
    for f in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        w = min(range(count), key=lambda k: (loads[k], len(dealt[k]), k))
        dealt[w].append(f)
        loads[w] += counts[f]
    return [sorted(files) for files in dealt]


@pytest.mark.parametrize("seed", range(6))
def test_deal_files_follows_its_rule(seed):
    rng = np.random.default_rng(seed)
    counts = [int(c) for c in rng.integers(0, 4 if seed % 2 else 1000, size=rng.integers(1, 300))]
    for count in (1, 2, 3, 8, 64):
        assert sharding.deal_files(counts, count) == _deal_by_rule(counts, count)


@pytest.mark.parametrize("n, world", list(itertools.product([0, 1, 7, 103], [1, 2, 3, 4])))
def test_record_ranges_partition_the_records(n, world):
    ranges = [sharding.record_range(n, sharding.ShardInfo(r, world)) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [hi - lo for lo, hi in ranges] == \
        [sharding.record_share(n, sharding.ShardInfo(r, world)) for r in range(world)]


def test_epoch_seeds_are_reproducible_and_distinct():
    assert sharding.epoch_seed(1, 2, 3) == sharding.epoch_seed(1, 2, 3)
    assert len({sharding.epoch_seed(1, e, r) for e in range(5) for r in range(4)}) == 20


def _meta():
    schema = schema_lib.Schema("image", (8, 8, 1), "float32", 10)
    split = schema_lib.Split(("train-0.tfrecord",), (5,), (100,))
    return schema_lib.Metadata("tfrecord", schema, {"train": split, "test": split})


def test_metadata_round_trips_and_names_bad_fields(tmp_path):
    meta = _meta()
    assert schema_lib.from_json(schema_lib.to_json(meta), "x") == meta
    bad = json.loads(schema_lib.to_json(meta))
    bad["kind"] = "audio"
    with pytest.raises(UsageError, match="'kind'.*audio.*Fix:"):
        schema_lib.from_json(json.dumps(bad), "x")
    with pytest.raises(UsageError, match="unreadable metadata"):
        schema_lib.from_json("{not json", str(tmp_path / "dataset.json"))
    lm = schema_lib.Schema("tokens", (129,), "int32", 256, task="lm")
    assert lm.input_shape == (128,)


def test_reading_metadata_names_missing_empty_and_mismatched_directories(tmp_path):
    with pytest.raises(UsageError, match="empty directory"):
        schema_lib.read(str(tmp_path), "tfrecord")
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(UsageError, match="without dataset.json"):
        schema_lib.read(str(tmp_path), "tfrecord")
    (tmp_path / "dataset.json").write_text(schema_lib.to_json(_meta()))
    with pytest.raises(UsageError, match="--dataset=tfrecord"):
        schema_lib.read(str(tmp_path), "lmdb")
    with pytest.raises(UsageError, match="--eval_split.*valid"):
        schema_lib.split_of(_meta(), "valid", "dataset.json", "--eval_split")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"dataset": "lmdb"}, "--data_dir"),
    ({"dataset": "tfds"}, "--tfds_name"),
    ({"shuffle_buffer": -1}, "--shuffle_buffer"),
    ({"synthetic_shape": "224,x,3"}, "--synthetic_shape"),
    ({"synthetic_shape": (0, 3)}, "--synthetic_shape"),
    ({"synthetic_examples": 3}, "--synthetic_examples"),
    ({"cache": "/no/such/dir/cache"}, "--cache"),
    ({"eval_split": ""}, "--eval_split"),
])
def test_bad_data_options_are_usage_errors(kwargs, fragment):
    with pytest.raises(UsageError) as err:
        cfg.DataConfig(**kwargs)
    assert fragment in str(err.value) and "Fix:" in str(err.value)


def test_synthetic_shape_accepts_flag_strings():
    assert cfg.DataConfig(synthetic_shape=["224", "224", "3"]).synthetic_shape == (224, 224, 3)
    assert cfg.DataConfig(synthetic_shape="32,32,3").synthetic_shape == (32, 32, 3)
    assert cfg.RunConfig(data=cfg.DataConfig(dataset="tfds", tfds_name="mnist")).data.dataset \
        == "tfds"


def test_progress_bar_and_shard_bounds():
    from horovod_train.data import writers  # TF only inside the record writers
    out = io.StringIO()
    bar = writers.Progress(10, "train", stream=out)
    for _ in range(10):
        bar.update()
    assert "100%" in out.getvalue() and "10/10" in out.getvalue()
    assert writers.shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _progress_output(stream, monkeypatch, records: int, seconds_each: float) -> str:
    from horovod_train.data import writers
    clock = iter(range(records + 2))
    monkeypatch.setattr(writers.time, "perf_counter", lambda: next(clock) * seconds_each)
    bar = writers.Progress(records, "train", stream=stream)
    for _ in range(records):
        bar.update()
    return stream.getvalue()


def test_progress_in_a_log_is_a_full_line_now_and_then(monkeypatch):
    """Not a terminal (CI, Slurm's output file): whole lines, the first record's, one
    every LINE_EVERY_S and the last; no carriage returns."""
    from horovod_train.data import writers
    text = _progress_output(io.StringIO(), monkeypatch, 1000, 0.5)  # 500 s in all
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert len(lines) == 2 + int(500 // writers.LINE_EVERY_S)
    assert " 1/1000 " in lines[0] and "100% 1000/1000 " in lines[-1]


def test_progress_on_a_terminal_redraws_one_line(monkeypatch):
    text = _progress_output(_Terminal(), monkeypatch, 100, 0.125)
    assert text.count("\n") == 1 and text.endswith("\n")
    assert 40 <= text.count("\r") <= 60  # every REDRAW_S of the 12.5 s, not every record


def test_importing_the_data_package_and_its_plans_imports_no_tensorflow():
    code = ("import sys, horovod_train.data, horovod_train.data.sharding, "
            "horovod_train.data.schema, horovod_train.data.options, horovod_train.data.writers, "
            "horovod_train.data.convert; "
            "from horovod_train import config; config.DataConfig(dataset='synthetic'); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
