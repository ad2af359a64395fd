"""What a checkpoint carries: a resumed model draws the dropout masks the uninterrupted
one would have drawn (the seed generator state is part of the saved state)."""
import keras
import numpy as np
import pytest

from horovod_train import checkpoint, precision
from horovod_train import config as cfg

pytestmark = pytest.mark.tf
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
