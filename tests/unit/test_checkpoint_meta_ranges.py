"""meta.json values a resume reads, out of range or of the wrong type (issue 55, item 2).

Each case writes a real checkpoint (checkpoint.save), edits one field of its meta.json
and recomputes the COMMIT marker's CRC as checkpoint_commit writes it (what an older or
buggy writer, or a hand repair, leaves), then reads it the way a launch does: the chief's
newest_meta -> written_by -> resume.plan (loop._resumption), and load_latest (the
restore). A bad value is refused in one line naming the field, the value, the range and
the fix; a field an older checkpoint may lack is taken as absent, with a warning.
No TF: numpy arrays stand in for the variables.
"""
import json
import math
import os

import numpy as np
import pytest

from checkpoint_edit import recommit
from horovod_train import checkpoint, checkpoint_fingerprint, checkpoint_meta, resume
from horovod_train import config as cfg
from horovod_train.data import layouts
from horovod_train.errors import UsageError

STATE = [np.zeros((2, 3), np.float32), np.array(7, np.int64)]
# Written by 2 ranks x batch 32 (global batch 64) at step 30: 20 steps per epoch, so
# 10 steps (640 examples) into epoch 1.
CONFIG = cfg.RunConfig(data=cfg.DataConfig(batch_size=32),
                       train=cfg.TrainConfig(checkpoint_every="10"))
RECORD = {"lr_schedule": {"scale": 2.0, "warmup_steps": 10},
          "position": {"epoch": 1, "epoch_examples": 640, "layouts": [[2, 32, 640]]}}
NUM_EXAMPLES = 1280  # the data's size, as the restore (CheckpointKeeper) knows it


def write_edited(directory, edit, step=30) -> str:
    """A committed ckpt-<step> in `directory` whose meta.json `edit(meta)` changed."""
    path = checkpoint.save(str(directory), step, STATE, CONFIG, keep=3,
                           facts={"world_size": 2}, record=json.loads(json.dumps(RECORD)))
    recommit(path, edit)
    return path


def resume_reads(directory, world_size=2):
    """What a launch reads before training: the plan (every rank, from the chief's
    meta), the epoch's layouts, the restore's load, and the restore's check of the
    position against the data's size (CheckpointKeeper.restore)."""
    config = dataclass_with_dir(directory)
    meta = checkpoint.newest_meta(str(directory))
    written = checkpoint_fingerprint.written_by(meta, config)
    launch = resume.Launch(world_size, 32, 1, float(world_size))
    plan = resume.plan(written, launch)
    recorded = ()
    if written is not None:
        writer = layouts.Layout(written.world_size, written.batch_size * written.accum_steps, 0)
        recorded = layouts.from_record(meta.get("position"), writer)
    loaded = checkpoint.load_latest(str(directory), config, STATE,
                                    facts={"world_size": world_size})
    path = meta[checkpoint_meta.READ_FROM]
    position = checkpoint.recorded_position(path)
    if position is not None:
        checkpoint_meta.check_against_data(path, checkpoint_meta.Recorded(
            loaded[0], *position, layouts=recorded), NUM_EXAMPLES, chief=True)
    return written, plan, loaded


def dataclass_with_dir(directory):
    import dataclasses
    return dataclasses.replace(CONFIG, train=dataclasses.replace(
        CONFIG.train, checkpoint_dir=str(directory)))


def setter(*keys, value):
    def edit(meta):
        target = meta
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


def position(**values):
    """An edit of several position fields at once (the first one's value is shown)."""
    return lambda meta: meta["position"].update(values)


BAD = [
    # (field as named in the message, keys in meta.json or an edit, bad value shown)
    ("position.epoch_examples", ("position", "epoch_examples"), -64),
    ("position.epoch_examples", ("position", "epoch_examples"), 100),  # not whole batches
    ("position.epoch_examples", ("position", "epoch_examples"), 10 ** 15),
    ("position.epoch_examples", ("position", "epoch_examples"), "640"),
    ("position.epoch", ("position", "epoch"), 10 ** 9),
    ("position.epoch", ("position", "epoch"), -1),
    ("position.epoch", ("position", "epoch"), 1.0),
    ("position.layouts", ("position", "layouts"), [[2, 32, -64]]),
    ("position.layouts", ("position", "layouts"), "2x32"),
    # The layouts and the examples disagree: the message shows both.
    ("position.epoch_examples", ("position", "layouts"), [[2, 32, 576]]),
    ("lr_schedule.scale", ("lr_schedule", "scale"), -4),
    ("lr_schedule.scale", ("lr_schedule", "scale"), 0),
    ("lr_schedule.scale", ("lr_schedule", "scale"), math.nan),
    ("lr_schedule.scale", ("lr_schedule", "scale"), math.inf),
    ("lr_schedule.scale", ("lr_schedule", "scale"), 1e300),
    ("lr_schedule.scale", ("lr_schedule", "scale"), "2"),
    ("lr_schedule.warmup_steps", ("lr_schedule", "warmup_steps"), "10"),
    ("lr_schedule.warmup_steps", ("lr_schedule", "warmup_steps"), -1),
    ("lr_schedule.warmup_steps", ("lr_schedule", "warmup_steps"), 2.5),
    ("lr_schedule", ("lr_schedule",), [2.0, 10]),
    ("position", ("position",), "1:640"),
    ("fingerprint.world_size", ("fingerprint", "world_size"), 0),
    ("fingerprint.world_size", ("fingerprint", "world_size"), -1),
    ("fingerprint.world_size", ("fingerprint", "world_size"), "2"),
    ("fingerprint.world_size", ("fingerprint", "world_size"), True),
    ("fingerprint.world_size", ("fingerprint", "world_size"), 10 ** 9),
    ("fingerprint.data.batch_size", ("fingerprint", "data.batch_size"), 0),
    ("fingerprint.speed.grad_accum_steps", ("fingerprint", "speed.grad_accum_steps"), "1"),
    ("step", ("step",), -30),
    # In range, yet not the writer's: step 30 at 20 steps per epoch (1280 examples, a
    # global batch of 64) is epoch 1, 640 examples in (issue 55 item 2, review).
    ("position.epoch", ("position", "epoch"), 5),
    ("position.epoch", ("position", "epoch"), 0),
    ("position.epoch_examples", position(epoch_examples=0, layouts=[]), 0),
    # The rate's multiplier is at most the writer's global batch (64): schedules.py.
    ("lr_schedule.scale", ("lr_schedule", "scale"), 1e6),
    ("lr_schedule.scale", ("lr_schedule", "scale"), 65.0),
    # The last layout is the writer's own: 2 ranks, not 1000.
    ("fingerprint.world_size", ("fingerprint", "world_size"), 1000),
]


@pytest.mark.parametrize("field, keys, value", BAD,
                         ids=[f"{f}={v!r}" for f, _, v in BAD])
def test_an_out_of_range_field_is_refused_in_one_line(tmp_path, field, keys, value):
    edit = keys if callable(keys) else setter(*keys, value=value)
    path = write_edited(tmp_path, edit)
    with pytest.raises(UsageError) as err:
        resume_reads(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert f"field {field}:" in message, message
    assert repr(value) in message, message  # the value received
    assert "expected" in message and "Fix:" in message, message
    assert os.path.basename(path) in message and "aside" in message, message
    assert "--batch_size" not in message, message  # never blamed on this launch's flags


@pytest.mark.parametrize("field, keys", [
    ("position.epoch_examples", ("position", "epoch_examples")),
    ("lr_schedule.scale", ("lr_schedule", "scale")),
])
def test_the_load_refuses_too(tmp_path, field, keys):
    """load_latest checks the record it loads: it may be an older checkpoint than the one
    the plan read (the newest's state unreadable)."""
    write_edited(tmp_path, setter(*keys, value=-4))
    with pytest.raises(UsageError, match=f"field {field}: received -4"):
        checkpoint.load_latest(str(tmp_path), dataclass_with_dir(tmp_path), STATE,
                               facts={"world_size": 2})


def drop(*keys):
    def edit(meta):
        target = meta
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return edit


@pytest.mark.parametrize("field, keys", [
    ("fingerprint.world_size", ("fingerprint", "world_size")),
    ("lr_schedule.scale", ("lr_schedule", "scale")),
    ("lr_schedule.warmup_steps", ("lr_schedule", "warmup_steps")),
    ("lr_schedule", ("lr_schedule",)),
    ("position", ("position",)),
    ("position.layouts", ("position", "layouts")),
])
def test_a_field_an_older_checkpoint_lacks_is_absent_with_a_warning(tmp_path, caplog, field,
                                                                    keys):
    write_edited(tmp_path, drop(*keys))
    written, plan, loaded = resume_reads(tmp_path)
    assert loaded[0] == 30
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
              and f"no {field} " in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]  # once, not per read
    assert "older" in warned[0] and "ckpt-000000030" in warned[0]
    if field == "fingerprint.world_size":
        assert written is None  # not resumable on another world size: said, not silent


def test_an_honest_checkpoint_reads_without_a_word(tmp_path, caplog):
    write_edited(tmp_path, lambda meta: None)
    written, plan, loaded = resume_reads(tmp_path)
    assert (written.world_size, written.lr_scale, written.warmup_steps) == (2, 2.0, 10)
    assert (plan.lr_scale, loaded[0]) == (2.0, 30)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_changed_global_batch_is_trusted_with_a_warning(tmp_path, caplog):
    """After --allow_global_batch_change the steps of earlier epochs were of another
    global batch: the step no longer tells the epoch, so a mismatch is said, not refused."""
    def edit(meta):
        meta["position"]["epoch"] = 0
        meta["global_batch_changed"] = True
    write_edited(tmp_path, edit)
    written, plan, loaded = resume_reads(tmp_path)
    assert loaded[0] == 30
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("position.epoch 0" in m and "global batch changed" in m for m in warned), warned


def test_the_record_is_checked_before_the_state_is_read(tmp_path, monkeypatch):
    """A refusal never waits on reading state.npz (GBs for a large model)."""
    write_edited(tmp_path, setter("lr_schedule", "scale", value=-4))

    def read(*args, **kwargs):
        raise AssertionError("state.npz read before the record was checked")
    monkeypatch.setattr(np, "load", read)
    with pytest.raises(UsageError, match="field lr_schedule.scale"):
        checkpoint.load_latest(str(tmp_path), dataclass_with_dir(tmp_path), STATE,
                               facts={"world_size": 2})


@pytest.mark.parametrize("chief", [True, False])
def test_a_missing_field_is_named_by_the_chief_only(tmp_path, caplog, chief):
    write_edited(tmp_path, drop("lr_schedule", "scale"))
    meta = checkpoint.newest_meta(str(tmp_path))
    checkpoint_fingerprint.written_by(meta, dataclass_with_dir(tmp_path), chief=chief)
    warned = [r for r in caplog.records if "no lr_schedule.scale" in r.getMessage()]
    assert len(warned) == (1 if chief else 0)
