"""Fixtures of the tf tier."""
import pytest


@pytest.fixture
def joined():
    """This process joined as a one-rank job by Horovod's hvd.init(), forgotten after."""
    from horovod_train.keras import horovod_api, state
    state.reset()
    horovod_api.init()
    yield
    state.reset()
