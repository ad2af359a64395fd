"""hvd.elastic of horovod.tensorflow, by its names: the states and run of
horovod_train.keras.elastic (one implementation), for GradientTape loops.

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, EPOCHS):
            ...  # tape steps
            state.commit()
    train(state)
"""
from horovod_train.errors import UsageError
from horovod_train.keras.elastic import KerasState, ObjectState, run

__all__ = ["ObjectState", "TensorFlowKerasState", "TensorFlowState", "run"]


class TensorFlowKerasState(KerasState):
    """A Keras 3 model and optimizer (Horovod's `backend` argument, a Keras backend
    module for TF 1 sessions, has nothing to choose here)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(model, optimizer, **kwargs)


class TensorFlowState(ObjectState):
    """A list of variables (tf.Variable or Keras 3) and attributes. TensorFlow 1's
    session is refused: this package runs TensorFlow 2 eagerly and in tf.function."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise UsageError("hvd.elastic.TensorFlowState: received a session; expected "
                             "TensorFlow 2 variables without one. Fix: pass "
                             "variables=model.variables + optimizer.variables")
        self.variables = list(variables or [])
        super().__init__(**kwargs)

    def _variables(self) -> list:
        return self.variables
