"""What a checkpoint carries: a resumed model draws the dropout masks the uninterrupted
one would have drawn (the seed generator state is part of the saved state), and each
variable is stored under its Keras path, so a model whose layers moved is refused."""
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


@pytest.mark.parametrize("examples, refused", [(1184, False), (1216, True), (1248, True),
                                               (64_000, True)])
def test_a_position_past_its_epochs_end_is_refused_at_restore(tmp_path, examples, refused):
    """issue 55, item 2: a meta.json position past its epoch's end (edited, its marker's CRC
    recomputed) trained a different run in silence. The writer begins the next epoch once
    less than a global batch is left, so with 1240 examples and a global batch of 32 the
    last position it records is 1184 (1216 + 32 > 1240): the data's size, known at
    restore, bounds it."""
    from horovod_train.grid import epoch_grid
    from horovod_train.trainer_types import CheckpointKeeper

    ckpt, _ = _classifier(10, directory=str(tmp_path))
    ckpt.maybe_save(30, position=(0, 960, [[1, 32, 960]]))  # 30 steps of 32
    ckpt.close()
    recommit(tmp_path / "ckpt-000000030", lambda meta: meta["position"].update(
        epoch_examples=examples, layouts=[[1, 32, examples]]))
    again, _ = _classifier(10, directory=str(tmp_path))
    recorded = (30, (Layout(1, 32, examples),))  # as loop.py reads them from the meta
    keeper = CheckpointKeeper(again, epoch_grid(1240, 32, 1, 3), recorded)
    try:
        if not refused:
            assert keeper.restore().epoch_examples == examples
            return
        with pytest.raises(UsageError) as err:
            keeper.restore()
    finally:
        keeper.close()
    assert re.search(rf"field position\.epoch_examples: received {examples}; expected at "
                     r"most 1208 .*Fix: move \S+ckpt-000000030 aside", str(err.value))
