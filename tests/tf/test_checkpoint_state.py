"""What a checkpoint carries: a resumed model draws the dropout masks the uninterrupted
one would have drawn (the seed generator state is part of the saved state)."""
import keras
import numpy as np
import pytest

from horovod_train import checkpoint, precision
from horovod_train import config as cfg
from horovod_train.errors import UsageError

CONFIG = cfg.RunConfig()


def _model():
    keras.utils.set_random_seed(1)
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
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, len(fresh_state))
    for variable, value in zip(fresh_state, arrays):
        variable.assign(value)
    assert step == 1
    np.testing.assert_array_equal(_mask(fresh), expected_next)


def _classifier(num_classes, facts=None, directory=None):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(num_classes, name="head")])
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
