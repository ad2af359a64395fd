"""Fixtures of the tf tier."""
import uuid

import pytest


@pytest.fixture
def joined():
    """This process joined as a one-rank job by Horovod's hvd.init(), forgotten after."""
    from horovod_train.keras import horovod_api, state
    state.reset()
    horovod_api.init()
    yield
    state.reset()


@pytest.fixture
def ram():
    """A fresh ram:// root of this test's own (ram:// is shared by the whole process)."""
    import tensorflow as tf
    root = f"ram://t{uuid.uuid4().hex[:12]}"
    tf.io.gfile.makedirs(root)
    yield root
    tf.io.gfile.rmtree(root)
