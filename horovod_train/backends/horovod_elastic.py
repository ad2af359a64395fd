"""Elastic Horovod's machinery: the in-memory state, its commit and sync, the restart
loop. The keeper the training loop sees is elastic.ElasticKeeper; this module is what
it needs of Horovod, and the only place elastic runs import it.

Every commit copies the training state to host memory and checks the driver's host
changes. When a rank dies, the others' next collective fails; they roll back to the
last commit, re-form the ring at the new size and go on. When hosts are added, the
ranks stop at the next commit, re-form, and the newcomers receive the state from
rank 0.

horovod.tensorflow.elastic's Keras state calls optimizer.variables() (a Keras 2 API),
so under Keras 3 we keep our own State over the same variables the checkpoints hold.
"""
import os

import tensorflow as tf
from absl import logging
from horovod.common import elastic as hvd_elastic
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

import horovod.tensorflow as hvd
from horovod_train.backends.base import ProcessInfo
from launch import contract

# TF error classes a collective raises when the ring breaks under it.
_RING_BROKEN = (tf.errors.UnknownError, tf.errors.InternalError, tf.errors.AbortedError,
                tf.errors.UnavailableError, tf.errors.FailedPreconditionError)


class TrainingState(hvd_elastic.State):
    """The variables plus the position in the data, committed to host memory."""

    def __init__(self, backend, variables):
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
        self.backend = backend
        self.variables = variables
        self.progress = {"step": 0, "epoch": 0, "epoch_examples": 0}
        self._saved_values, self._saved_progress = None, None
        self.save()

    def save(self):
        self._saved_values = [v.numpy() for v in self.variables]
        self._saved_progress = dict(self.progress)

    def restore(self):
        for variable, value in zip(self.variables, self._saved_values):
            variable.assign(value)
        self.progress = dict(self._saved_progress)
        logging.warning("elastic | a rank was lost: rolled back to the commit at step %d",
                        self.progress["step"])

    def sync(self):
        # Called after every (re)start of the ring: rank 0 is a rank that has the state.
        refresh_info(self.backend)
        self.backend.broadcast_variables(self.variables)
        self.progress = self._bcast_object(self.progress)
        self.save()


def refresh_info(backend):
    from horovod_train.runtime import quiet_non_chief
    backend.info = ProcessInfo(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
    quiet_non_chief(backend.info.is_chief)


def _reset():
    hvd.shutdown()
    hvd.init()


def run_elastic(func, on_interrupt=lambda: None):
    """hvd.elastic.run for our step: its own check matches 'HorovodAllreduce' in the
    error text, which our grouped allreduce ('HorovodGroupedAllreduce') never says.
    on_interrupt runs before the ring re-forms (which waits for newcomers to start)."""
    return hvd_elastic.run_fn(translate_ring_errors(func, on_interrupt), _reset)


def translate_ring_errors(func, on_interrupt=lambda: None):
    """func, with a broken ring's TF errors turned into Horovod's restart signal. (A
    compiled step stopped by the in-step divergence check fails with an assertion, not
    one of these: it ends the job, and the Keras caller raises the verdict it holds.)"""
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except _RING_BROKEN as err:
            on_interrupt()
            raise HorovodInternalError(err) from err
        except HostsUpdatedInterrupt:
            on_interrupt()
            raise
    return wrapper


class Ring:
    """What elastic.ElasticKeeper asks of Horovod: progress that every (re)formed ring
    shares, a commit, the host check, and the restart loop."""

    def __init__(self, backend, variables):
        self.state = TrainingState(backend, variables)

    @property
    def progress(self) -> dict:
        """{"step", "epoch", "epoch_examples"}: rank 0's after every (re)start."""
        return self.state.progress

    @progress.setter
    def progress(self, value: dict):
        self.state.progress = dict(value)

    def run(self, attempt, pause=lambda: None):
        """attempt() under hvd.elastic's restart loop: again after every re-formed ring
        (rolled back to the last commit when a rank was lost); pause() runs before."""
        return run_elastic(lambda _state: attempt(), pause)(self.state)

    def commit(self):
        self.state.save()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt when the driver saw hosts come or go."""
        self.state.check_host_updates()


class KerasDriver(hvd_elastic.State):
    """Horovod's side of horovod_train.keras.elastic.KerasState (the owner): the host
    updates Horovod's driver announces, reset callbacks, and the restart loop. Horovod's
    own Keras state reads optimizer.variables() (a Keras 2 API), so the owner keeps the
    Keras 3 state and this forwards Horovod's calls to it."""

    def __init__(self, backend, owner):
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
        self.backend, self.owner = backend, owner

    def save(self):
        self.owner.save()

    def restore(self):
        self.owner.restore()

    def _refresh(self):
        """The re-formed ring's rank and size wherever they are read: the backend's
        info (hvd.rank(), hvd.size()) and the joined strategy's (strategy.size, which
        the optimizer and the callbacks read)."""
        from horovod_train.keras import state as job
        refresh_info(self.backend)
        strategy = job.active()
        if strategy is not None and strategy.backend is self.backend:
            strategy.info = self.backend.info

    def reset(self):
        """Horovod's hook after hvd.init() re-formed the ring, before the reset callbacks
        and the sync: the callbacks see the new size, as under Horovod. The model's
        traced train step holds the old ring's rank and size as constants (the in-step
        divergence check's [size, 2] table, the size-1 shortcut): it is traced anew."""
        self._refresh()
        model = self.owner.model
        if getattr(model, "train_function", None) is not None:
            model.train_function = None  # fit's make_train_function() builds it again

    def sync(self):
        self._refresh()  # after a re-formed ring: the new rank and size
        self.owner.sync()

    def run(self, func, args, kwargs):
        """func(owner, *args, **kwargs) under Horovod's restart loop when horovodrun
        runs elastic; once (after a sync) otherwise, where no driver re-forms a ring."""
        if not contract.horovod_elastic(os.environ):
            self.sync()
            return func(self.owner, *args, **kwargs)
        return run_elastic(lambda driver, *a, **k: func(driver.owner, *a, **k))(
            self, *args, **kwargs)
