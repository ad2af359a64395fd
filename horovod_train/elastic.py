"""Elastic Horovod: ranks leave and join, training goes on.

Run every rank with --elastic under
    horovodrun -np 2 --min-np 1 --max-np 3 --host-discovery-script ./hosts.sh ...
Every --elastic_commit_every steps the ranks *commit*: the training state is copied to
host memory and the driver's host changes are checked. When a rank dies, the others'
next collective fails; they roll back to the last commit, re-form the ring at the new
size and go on. When hosts are added, the ranks stop at the next commit, re-form, and
the newcomers receive the state from rank 0. Steps after the last commit are redone,
never lost twice; committed ones are never lost.

Progress is counted in examples, not steps: with a fixed per-rank batch, a step's size
changes with the world size, so the position in an epoch is "examples consumed", and
a re-formed ring resumes the epoch at that offset, re-sharded over the new ranks.

horovod.tensorflow.elastic's Keras state calls optimizer.variables() (a Keras 2 API),
so under Keras 3 we keep our own State over the same variables the checkpoints hold.
"""
import tensorflow as tf
from absl import logging
from horovod.common import elastic as hvd_elastic
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

import horovod.tensorflow as hvd
from horovod_train.backends.base import ProcessInfo
from horovod_train.data import sharding

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
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except _RING_BROKEN as err:
            on_interrupt()
            raise HorovodInternalError(err) from err
        except HostsUpdatedInterrupt:
            on_interrupt()
            raise
    return hvd_elastic.run_fn(wrapper, _reset)


class ElasticLoop:
    """Drives the trainer's step, logging and evaluation through elastic restarts."""

    def __init__(self, trainer, num_examples: int, commit_every: int):
        self.trainer, self.num_examples, self.commit_every = trainer, num_examples, commit_every
        config = trainer.config
        self.epochs, self.max_steps = config.train.epochs, config.train.max_steps
        self.resizes = []  # (step, world size) at every (re)start of the ring

    def _done(self, progress) -> bool:
        return progress["epoch"] >= self.epochs or \
            bool(self.max_steps and progress["step"] >= self.max_steps)

    def _place(self, progress) -> tuple[int, int]:
        """Points the trainer at this ring's grid; returns (examples per step, the
        steps of the current epoch already done at this size)."""
        from horovod_train.loop import step_batch
        t, size = self.trainer, self.trainer.backend.info.size
        per_step = step_batch(t.config) * size
        t.per_epoch = sharding.steps_per_epoch(self.num_examples, step_batch(t.config), size)
        offset = min(progress["epoch_examples"] // per_step, t.per_epoch)
        remaining = (self.epochs - progress["epoch"]) * t.per_epoch - offset
        t.total = progress["step"] + remaining
        if self.max_steps:
            t.total = min(t.total, self.max_steps)
        t.global_step = progress["step"]
        return per_step, offset

    def train(self, state: TrainingState) -> float:
        t, progress = self.trainer, state.progress
        per_step, in_epoch = self._place(progress)
        size = t.backend.info.size
        self.resizes.append((progress["step"], size))
        logging.info("elastic | ring of %d ranks | from step %d (epoch %d, example %d of it)",
                     size, progress["step"], progress["epoch"], progress["epoch_examples"])
        batch_iter = t._batches(self.epochs, progress["epoch"] * t.per_epoch + in_epoch)
        while not self._done(progress):
            t._one_step(batch_iter)  # advances t.global_step, which is progress["step"]
            if t.stop_agreed:  # SIGTERM somewhere: in-memory commits do not outlive us
                from horovod_train.stopping import StopRequested
                raise StopRequested(t.global_step, saved=False)
            progress["step"] += 1
            progress["epoch_examples"] += per_step
            in_epoch += 1
            if in_epoch == t.per_epoch:
                progress.update(epoch=progress["epoch"] + 1, epoch_examples=0)
                in_epoch = 0
            if progress["step"] % t.config.train.log_every == 0:
                t._log_interval()
            if progress["step"] % self.commit_every == 0:
                state.save()
                logging.info("elastic | committed step %d", progress["step"])
                state.check_host_updates()  # raises HostsUpdatedInterrupt on a change
        return t._evaluate("final")


def train(trainer, variables, num_examples: int, commit_every: int) -> tuple[float, dict]:
    """Trains elastically; returns (final accuracy, elastic facts for the summary)."""
    state = TrainingState(trainer.backend, variables)
    loop = ElasticLoop(trainer, num_examples, commit_every)
    # Re-forming the ring is not a stalled peer: the watchdog re-arms at the next step.
    accuracy = run_elastic(loop.train, trainer.watchdog.disarm)(state)
    trainer.global_step = state.progress["step"]
    return accuracy, {"elastic_resizes": loop.resizes, "elastic_steps": state.progress["step"]}
