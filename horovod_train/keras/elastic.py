"""hvd.elastic for Keras 3: KerasState, run, and the three state callbacks, by Horovod's
names and meaning.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(..., epochs=EPOCHS - state.epoch, callbacks=[
            hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state)])
    train(state)

KerasState holds the Keras 3 model's weights and its optimizer's variables (and any
keyword attributes such as batch and epoch) in host memory: sync() gives every rank
rank 0's, commit() saves them (and checks the driver's host changes), restore() rolls
back. Under elastic horovodrun, run() re-forms the ring after a lost rank or a host
change and calls the function again; under a backend that cannot (mwms, one process)
it calls it once, after a sync.
"""
import copy
import functools

import keras
import tensorflow as tf

from horovod_train.keras import divergence_guard, horovod_api, state as job


class ObjectState:
    """Horovod's ObjectState: keyword attributes (batch, epoch, ...) that sync() gives
    every rank from rank 0, commit() saves and restore() rolls back. Horovod's
    bcast_object and get_rank arguments are accepted and unused: the job's own
    broadcast_object and rank serve. Subclasses add variables (_variables)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._names = sorted(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._reset_callbacks = []
        self._driver = job.require("hvd.elastic state").backend.elastic_driver(self)
        self._saved = None
        self.save()

    def _variables(self) -> list:
        return []

    def save(self):
        variables = self._variables()
        self._saved = (variables, [keras.ops.convert_to_numpy(v) for v in variables],
                       {n: copy.deepcopy(getattr(self, n)) for n in self._names})

    def restore(self):
        variables, values, attrs = self._saved
        for variable, value in zip(variables, values):
            variable.assign(value)
        for name, value in attrs.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self):
        """Rank 0's variables and attributes on every rank; then saved. The job's tape
        guards start again at their first call on every rank alike."""
        variables = self._variables()
        if variables:
            horovod_api.broadcast_variables(variables, root_rank=0)
        attrs = horovod_api.broadcast_object({n: getattr(self, n) for n in self._names}, 0)
        for name, value in attrs.items():
            setattr(self, name, value)
        divergence_guard.restart_source_guards(job.require("hvd.elastic state"))
        self.save()

    def commit(self):
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises Horovod's HostsUpdatedInterrupt when its driver saw hosts change."""
        if self._driver is not None:
            self._driver.check_host_updates()

    def register_reset_callbacks(self, callbacks):
        if self._driver is not None:
            self._driver.register_reset_callbacks(callbacks)
        else:
            self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        if self._driver is not None:
            self._driver.on_reset()
        for callback in self._reset_callbacks:
            callback()


class KerasState(ObjectState):
    """A Keras 3 model's weights and its optimizer's variables, with the attributes."""

    def __init__(self, model, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(**kwargs)

    def _variables(self) -> list:
        # Built here, not by the first fit: a rank that joins a running job syncs
        # before it trains, and must hold the slots the others' state has.
        if self.optimizer is not None and not self.optimizer.built and self.model.built:
            self.optimizer.build(self.model.trainable_variables)
        opt = list(self.optimizer.variables) if self.optimizer is not None else []
        return list(self.model.weights) + opt


def run(func):
    """Horovod's @hvd.elastic.run: func(state, ...) again after every re-formed ring."""
    attempt = _raising_verdicts(func)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if state._driver is None:
            state.sync()
            return attempt(state, *args, **kwargs)
        return state._driver.run(attempt, args, kwargs)
    return wrapper


def _raising_verdicts(func):
    """func, raising RanksDiverged when the optimizer's in-step check stopped the step:
    typed from the verdict tensor every rank holds alike (never from the error's text),
    so the restart loop ends the job instead of rolling back to a commit, which would
    hide the divergence."""
    def attempt(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as err:
            found = [v.take() for v in divergence_guard.verdicts(
                job.active(), getattr(state, "optimizer", None))]
            diverged = next((d for d in found if d is not None), None)
            if diverged is None:
                raise
            raise diverged from err
    return attempt


class CommitStateCallback(keras.callbacks.Callback):
    """state.commit() every `batches_per_commit` batches and at each epoch end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state, self.batches_per_commit = state, batches_per_commit
        self.left = batches_per_commit

    def on_train_begin(self, logs=None):
        self.left = self.batches_per_commit  # the same count on every rank after a sync

    def on_train_batch_end(self, batch, logs=None):
        self.left -= 1
        if self.left == 0:
            self.state.commit()
            self.left = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """state.batch follows the batch (0 at each epoch end). As Horovod's, it sets the
    callbacks' params["steps"] of the first epoch after a reset to the batches the
    committed state had not done; Keras 3's fit still runs that epoch whole."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params["steps"]
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """state.epoch counts epochs across resets, for fit(epochs=EPOCHS - state.epoch)
    without initial_epoch (Keras's epoch index then restarts at 0 in every attempt)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["KerasState", "run", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback"]
