"""The chief's records in a run dir other users can write (issue 55, item 1): another
local user (`nobody`, for real, through runuser) plants RUN/metrics.jsonl or RUN/tb as a
symlink. The chief appends nothing through a link, says so in one line, and the run goes
on without that record; a run dir others can write is named once at start.
TF tier: the observer's TensorBoard writer is TensorFlow's own."""
import glob
import logging
import os

import pytest

from unit.test_stacks import PROFILE, _as_nobody, shared  # noqa: F401 - a fixture

import tensorflow as tf  # noqa: E402

from horovod_train import config as cfg  # noqa: E402
from horovod_train.observe import observer as observer_lib  # noqa: E402


def _run_observer(run_dir: str) -> None:
    """A chief's observer over a short run: start, one interval, the end."""
    config = cfg.RunConfig(observe=cfg.ObserveConfig(run_dir=run_dir, progress="lines",
                                                     baseline_cache=""))
    obs = observer_lib.ChiefObserver(config, 1, 10, {"kind_of_start": "fresh"})
    obs.interval({"step": 10, "total_steps": 10, "steps": 10, "loss": 1.0, "traced": False,
                  "samples_per_sec": 100.0, "samples_per_sec_per_rank": [100.0],
                  "seconds_per_step": {"compute": 0.01}})
    obs.close({"steps": 10, "samples_per_sec": 100.0, "wall_seconds": 1.0,
               "test_accuracy": None})


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_metrics_jsonl_link_another_user_planted_is_not_written_through(shared, caplog):
    """The issue's case for the records: RUN/metrics.jsonl -> a file of ours (a shell
    profile). Nothing is appended to it; one line says why; TensorBoard still writes."""
    _as_nobody("ln", "-s", str(shared.victim), os.path.join(shared.run, "metrics.jsonl"))
    with caplog.at_level(logging.WARNING):
        _run_observer(shared.run)
    assert shared.victim.read_text() == PROFILE
    lines = [line for line in _warnings(caplog) if "metrics.jsonl" in line]
    assert len(lines) == 1, _warnings(caplog)
    path = os.path.join(shared.run, "metrics.jsonl")
    assert lines[0].startswith(f"records | {path!r}: received a symlink; expected a file "
                               f"of yours"), lines[0]
    assert "Fix: " in lines[0] and "without metrics.jsonl" in lines[0], lines[0]
    assert glob.glob(os.path.join(shared.run, "tb", "events.out.tfevents.*"))


def test_a_tb_link_to_another_users_dir_gets_no_events(shared, caplog):
    """RUN/tb -> a directory of nobody's: TensorFlow would create the events file there
    (by a name it opens itself, link or not). The chief refuses in one line and writes
    metrics.jsonl as usual."""
    theirs = os.path.join(shared.run, "theirs")
    _as_nobody("mkdir", "-m", "777", theirs)
    _as_nobody("ln", "-s", theirs, os.path.join(shared.run, "tb"))
    with caplog.at_level(logging.WARNING):
        _run_observer(shared.run)
    assert os.listdir(theirs) == []
    lines = [line for line in _warnings(caplog) if "'tb'" in line or "/tb'" in line]
    assert len(lines) == 1, _warnings(caplog)
    assert "received a symlink" in lines[0] and "without TensorBoard" in lines[0], lines[0]
    with open(os.path.join(shared.run, "metrics.jsonl")) as f:
        kinds = [line.split('"kind": "')[1].split('"')[0] for line in f]
    assert kinds == ["start", "train", "end"], kinds


def test_a_run_dir_others_can_write_is_named_once_at_start(shared, caplog):
    with caplog.at_level(logging.WARNING):
        _run_observer(shared.run)
    lines = [line for line in _warnings(caplog) if "sticky bit" in line]
    assert len(lines) == 1, _warnings(caplog)
    assert lines[0].startswith(f"run dir | {shared.run!r}: received a directory others can "
                               f"write (mode 777)"), lines[0]
    with open(os.path.join(shared.run, "metrics.jsonl")) as f:
        assert f.readline().startswith("{")
    assert os.stat(os.path.join(shared.run, "metrics.jsonl")).st_uid == os.geteuid()
