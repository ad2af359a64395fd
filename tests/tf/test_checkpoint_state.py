"""What a checkpoint carries: a resumed model draws the dropout masks the uninterrupted
one would have drawn (the seed generator state is part of the saved state), and each
variable is stored under its Keras path, so a model whose layers moved is refused."""
import dataclasses
import json
import re

import keras
import numpy as np
import pytest

from checkpoint_edit import recommit
from horovod_train import checkpoint, precision
from horovod_train.data.layouts import Layout
from horovod_train import config as cfg
from horovod_train.errors import UsageError

CONFIG = cfg.RunConfig()


def _relaunch(seed=1):
    """What a relaunch starts from: a fresh process, where Keras numbers auto-named objects
    (sequential, seed_generator, sgd) from zero again, and checkpoints are keyed by their
    paths. Building twice in one process would otherwise give `sequential_1/...`."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)


def _model():
    _relaunch()
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dropout(0.5)])
    optimizer = keras.optimizers.SGD()
    optimizer.build(model.trainable_variables)
    return model, optimizer, precision.DynamicLossScale(enabled=False)


def _mask(model):
    return np.asarray(model(np.ones((4, 64), np.float32), training=True)) == 0


def test_resume_restores_the_dropout_seed_state(tmp_path):
    model, optimizer, scale = _model()
    state = checkpoint.training_state(model, optimizer, scale)
    assert any("seed_generator" in v.path for v in state if hasattr(v, "path"))
    _mask(model)  # advance the generator: the saved state is not the initial one
    checkpoint.save(str(tmp_path), 1, state, CONFIG, keep=1)
    expected_next = _mask(model)

    fresh, fresh_opt, fresh_scale = _model()
    fresh_state = checkpoint.training_state(fresh, fresh_opt, fresh_scale)
    assert not np.array_equal(_mask(fresh), expected_next)  # a new run draws other masks
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, fresh_state)
    for variable, value in zip(fresh_state, arrays):
        variable.assign(value)
    assert step == 1
    np.testing.assert_array_equal(_mask(fresh), expected_next)


def _classifier(num_classes, facts=None, directory=None):
    _relaunch()
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(num_classes, name="head")])
    return _checkpointer(model, directory, facts)


def _checkpointer(model, directory, facts=None):
    optimizer = keras.optimizers.SGD()
    optimizer.build(model.trainable_variables)
    state = checkpoint.training_state(model, optimizer, precision.DynamicLossScale(enabled=False))
    from horovod_train.backends.local import LocalBackend
    config = cfg.RunConfig(train=cfg.TrainConfig(checkpoint_dir=directory, checkpoint_every="1"))
    return checkpoint.Checkpointer(config, LocalBackend(), state, 1, data_facts=facts), state


def test_other_class_count_is_refused_before_any_assign(tmp_path):
    # A checkpoint from before the data facts were recorded: only the shapes can tell.
    writer, state = _classifier(10, directory=str(tmp_path))
    writer.restore()
    writer.maybe_save(1)
    writer.close()
    reader, state = _classifier(5, directory=str(tmp_path))
    before = [v.numpy() for v in state]
    with pytest.raises(UsageError) as err:
        reader.restore()
    reader.close()
    assert "head/kernel" in str(err.value) and "(64, 10)" in str(err.value)
    assert "(64, 5)" in str(err.value) and "Fix" in str(err.value)
    for variable, value in zip(state, before):
        np.testing.assert_array_equal(variable.numpy(), value)  # nothing half-restored


def test_data_facts_name_the_class_count_that_differs(tmp_path):
    writer, _ = _classifier(10, {"input_shape": (8, 8, 1), "num_classes": 10}, str(tmp_path))
    writer.restore()
    writer.maybe_save(1)
    writer.close()
    reader, _ = _classifier(5, {"input_shape": (8, 8, 1), "num_classes": 5}, str(tmp_path))
    with pytest.raises(UsageError, match="num_classes: checkpoint 10, now 5"):
        reader.restore()
    reader.close()


# --- Keyed by variable path (issue 39, part 5) ---

def _stack(names, directory, seed=1):
    """Two same-shaped Dense layers: stored by position, each fits the other's place."""
    _relaunch(seed)
    layers = [keras.layers.Dense(4, name=name) for name in names]
    return _checkpointer(keras.Sequential([keras.Input((4,))] + layers), directory)


def _write(directory, names):
    writer, state = _stack(names, directory)
    writer.restore()
    writer.maybe_save(1)
    writer.close()
    return state


def test_swapped_same_shape_layers_are_refused_naming_the_difference(tmp_path):
    _write(str(tmp_path), ["encoder", "decoder"])
    reader, state = _stack(["decoder", "encoder"], str(tmp_path), seed=2)
    before = [v.numpy() for v in state]
    with pytest.raises(UsageError) as err:  # positionally: encoder's weights in decoder
        reader.restore()
    reader.close()
    message = str(err.value)
    assert re.search(r"holds '[\w/]*encoder/kernel' at position 0 of its \d+ variables, "
                     r"where this model has '[\w/]*decoder/kernel'", message), message
    assert "Fix:" in message
    for variable, value in zip(state, before):
        np.testing.assert_array_equal(variable.numpy(), value)  # nothing half-restored


def test_keras_paths_and_the_loss_scale_names_round_trip(tmp_path):
    written = _write(str(tmp_path), ["encoder", "decoder"])
    with open(tmp_path / "ckpt-000000001" / "meta.json") as f:
        names = json.load(f)["names"]
    assert names == [v.path for v in written[:-2]] + ["loss_scale", "loss_scale_good_steps"]
    assert any(name.endswith("encoder/kernel") for name in names)
    reader, state = _stack(["encoder", "decoder"], str(tmp_path), seed=2)
    assert reader.restore() == (1, None)  # (step, position: none recorded)
    reader.close()
    for variable, value in zip(state, written):
        np.testing.assert_array_equal(variable.numpy(), value.numpy())


def _keeper_after_edit(directory, edit):
    """A checkpoint of 37 steps of 32 (1 rank) into an epoch of 1240 examples, its meta.json
    edited by `edit`, and the keeper a relaunch restores it with (the data's size known)."""
    from horovod_train.data.layouts import from_record
    from horovod_train.grid import epoch_grid
    from horovod_train.trainer_types import CheckpointKeeper

    ckpt, _ = _classifier(10, directory=str(directory))
    ckpt.maybe_save(37, position=(0, 1184, [[1, 32, 1184]]))
    ckpt.close()
    path = directory / "ckpt-000000037"
    recommit(path, edit)
    with open(path / "meta.json") as f:
        position = json.load(f)["position"]
    again, _ = _classifier(10, directory=str(directory))
    recorded = (37, from_record(position, Layout(1, 32, 0)))  # as loop.py reads them
    return CheckpointKeeper(again, epoch_grid(1240, 32, 1, 3), recorded)


def _restored(keeper):
    try:
        return keeper.restore()
    finally:
        keeper.close()


@pytest.mark.parametrize("examples, refused", [(1184, False), (1216, True), (1248, True),
                                               (64_000, True)])
def test_a_position_past_its_epochs_end_is_refused_at_restore(tmp_path, examples, refused):
    """issue 55, item 2: a meta.json position past its epoch's end (edited, its marker's CRC
    recomputed) trained a different run in silence. The writer begins the next epoch once
    less than a global batch is left, so with 1240 examples and a global batch of 32 the
    last position it records is 1184 (1216 + 32 > 1240): the data's size, known at
    restore, bounds it."""
    keeper = _keeper_after_edit(tmp_path, lambda meta: meta["position"].update(
        epoch_examples=examples, layouts=[[1, 32, examples]]))
    if not refused:
        assert _restored(keeper).epoch_examples == examples
        return
    with pytest.raises(UsageError) as err:
        _restored(keeper)
    assert re.search(rf"field position\.epoch_examples: received {examples}; expected at "
                     r"most 1208 .*Fix: move \S+ckpt-000000037 aside", str(err.value))


@pytest.mark.parametrize("field, position, expected", [
    ("position.epoch", {"epoch": 1}, 0),
    ("position.epoch_examples", {"epoch_examples": 0, "layouts": []}, 1184),
    ("position.epoch_examples", {"epoch_examples": 32, "layouts": [[1, 32, 32]]}, 1184),
])
def test_a_position_in_range_but_not_the_steps_is_refused_at_restore(tmp_path, field, position,
                                                                     expected):
    """issue 55, item 2 (review): an epoch in its range yet not the writer's passed every
    check, and the relaunch trained another run (fewer steps, or none: "already complete
    at step 30 of -20", exit 0). Step 37 at 38 steps of 32 per epoch of 1240 examples is
    epoch 0, 1184 examples in; the global batch never changed, so nothing else is."""
    keeper = _keeper_after_edit(tmp_path, lambda meta: meta["position"].update(position))
    with pytest.raises(UsageError) as err:
        _restored(keeper)
    received = next(iter(position.values()))
    assert re.search(rf"field {re.escape(field)}: received {received}; expected {expected} "
                     r"\(at step 37, 38 steps per epoch of 1240 examples in global batches of "
                     r"32: epoch 0, 1184 examples in\)\. Fix: move \S+ckpt-000000037 aside",
                     str(err.value)), str(err.value)


def test_after_a_global_batch_change_the_position_is_trusted(tmp_path):
    """--allow_global_batch_change: earlier steps were of another global batch, so the
    step does not tell the epoch; the record (flagged by its writer) is trusted."""
    def edit(meta):
        meta["position"]["epoch"] = 1
        meta["global_batch_changed"] = True
    assert _restored(_keeper_after_edit(tmp_path, edit)).epoch == 1


def test_a_relaunch_that_changes_the_global_batch_flags_its_checkpoints(tmp_path):
    """The flag is written by the launch that changed the global batch, and kept."""
    ckpt, _ = _classifier(10, directory=str(tmp_path))
    ckpt.maybe_save(37, position=(0, 1184, [[1, 32, 1184]]))
    ckpt.close()
    recommit(tmp_path / "ckpt-000000037", lambda meta: meta["fingerprint"].update(
        {"data.batch_size": 16}) or meta["position"].update(layouts=[[1, 16, 1184]]))
    again, _ = _classifier(10, directory=str(tmp_path))
    again.config = dataclasses.replace(again.config, train=dataclasses.replace(
        again.config.train, allow_global_batch_change=True))
    again.restore()
    again.maybe_save(38, position=(1, 0, []))
    again.close()
    with open(tmp_path / "ckpt-000000038" / "meta.json") as f:
        assert json.load(f)["global_batch_changed"] is True
