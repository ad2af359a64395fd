"""The drop-in's divergence guard: model.fit never ends with ranks holding other models.

Two checks, both comparing horovod_train.divergence's checksum of the trainable weights
across ranks, both deciding from values every rank holds alike (so every rank stops at
the same point, none waits for a peer that left):
  - at epoch ends (divergence.epoch_end_due: the first, then those crossing a multiple
    of MIN_STEPS_BETWEEN_EPOCH_CHECKS updates) and at
    the end of training, from the broadcast callbacks (ours and Horovod's names);
  - inside the train step, every `divergence_check_steps` updates of the
    DistributedOptimizer (default hvd_options.DEFAULT_DIVERGENCE_CHECK_STEPS), for
    scripts that run none of those callbacks: one small allreduce, then a verdict.

The in-step verdict is a tensor (a Verdict: which ranks differ, at which update), the
same on every rank. The step records it and, when a rank differs, stops there on every
rank alike: model.fit runs none of our code between steps, so the stop is an in-graph
assertion carrying the guard's one line. A caller that owns the loop (hvd.elastic.run,
a GradientTape loop) raises the typed RanksDiverged from the Verdict, never from the
error's text.
"""
import numpy as np
import tensorflow as tf
from absl import logging

from horovod_train import divergence


class EpochGuard:
    """The epoch-end and train-end checks of one callback in model.fit. Its record is
    reset at every train begin, so every rank of a fit (an elastic newcomer included,
    since a reset runs fit anew on every rank) holds the same one."""

    def __init__(self, excluded_ids=frozenset()):
        self.excluded_ids = excluded_ids
        self.last = None  # the update count at the last check of this fit

    def train_begin(self):
        self.last = None

    def epoch_end(self, strategy, model, epoch: int, epoch_steps=None):
        step = _updates(model)
        if divergence.epoch_end_due(step, epoch_steps, first=self.last is None):
            self._check(strategy, model, step, f"the end of epoch {epoch + 1}")

    def train_end(self, strategy, model):
        step = _updates(model)
        if step != self.last:
            self._check(strategy, model, step, "the end of training")

    def _check(self, strategy, model, step, where):
        self.last = step
        if strategy.size == 1:
            return
        weights = [w for w in model.trainable_weights if id(w) not in self.excluded_ids]
        try:
            divergence.check(strategy.backend, weights, step, where)
        except divergence.RanksDiverged as err:
            logging.error("%s", err)
            raise


def _updates(model) -> int:
    opt = model.optimizer
    return int(opt.iterations.numpy()) if opt is not None else 0


IN_STEP = "an in-step check of DistributedOptimizer"


class Verdict:
    """The in-step check's last verdict: a bool per rank (True: differs from rank 0) and
    the update it was taken at. Plain tf.Variables outside the optimizer's saved and
    broadcast state: a verdict belongs to this run, not to the model."""

    def __init__(self, where=IN_STEP):
        self.where = where  # what took it, for the message
        self.diverged = tf.Variable(tf.zeros([0], tf.bool), shape=tf.TensorShape([None]),
                                    trainable=False, name="diverged_ranks")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="verdict_step")

    def record(self, mask, step):
        self.diverged.assign(mask)
        self.step.assign(tf.cast(step, tf.int64))

    def take(self, where=None):
        """(On the host) RanksDiverged if the last check found a rank that differs, else
        None; the verdict is then cleared, so a later, unrelated error is not taken
        for it."""
        ranks = np.flatnonzero(self.diverged.numpy()).tolist()
        self.diverged.assign(tf.zeros([0], tf.bool))
        where = where or self.where
        return divergence.RanksDiverged(ranks, int(self.step.numpy()), where) if ranks else None


def in_step(backend, variables, iterations, every: int, verdict: Verdict, where=IN_STEP):
    """Inside a tf.function: on updates that are multiples of `every`, every rank's
    checksum (one allgather: the bits each rank computed, moved, never added), then the
    verdict, recorded in `verdict`; the step stops on every rank alike when some rank
    differs (stop_if_diverged)."""
    due = tf.logical_and(iterations > 0, tf.equal(iterations % every, 0))

    def check():
        local = divergence.checksum(variables)
        mask = divergence.differing_mask(backend.comm.allgather(tf.reshape(local, [1, 2])))
        verdict.record(mask, iterations)
        stop_if_diverged(mask, iterations, where)
        return tf.no_op()
    tf.cond(due, check, tf.no_op)


def stop_if_diverged(mask, step, where=IN_STEP):
    """Fails the running step when `mask` names a rank (the same mask on every rank, so
    every rank fails here) with the guard's one line. The line is formatted by the one
    formatter, divergence.message; nothing reads it back."""
    def stop():
        line = tf.py_function(lambda m, s: _line(m, s, where), [mask, step], tf.string)
        tf.debugging.Assert(tf.logical_not(tf.reduce_any(mask)), [line])
        return tf.no_op()
    tf.cond(tf.reduce_any(mask), stop, tf.no_op)


def _line(mask, step, where) -> str:
    ranks = np.flatnonzero(mask.numpy()).tolist()
    line = divergence.message(ranks, int(step.numpy()), where)
    logging.error("%s", line)
    return line


IN_TAPE = "an in-step check of DistributedGradientTape"


class SourceGuard:
    """The guard of a loop that applies its own updates (a GradientTape loop), counted
    in gradient calls: at the first call rank 0's values of the sources are broadcast
    (the same first-update broadcast as the optimizer's: a script that forgets
    hvd.broadcast_variables still trains one model), and every `every` calls their
    checksums are compared (in_step). Its variables are made outside any tf.function
    (a tape is made anew at every trace) and belong to the job, not to a model."""

    def __init__(self, every: int):
        self.every = every
        with tf.init_scope():
            self.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="guarded_calls")
            self.verdict = Verdict(IN_TAPE)

    def on_gradients(self, backend, sources):
        """After this call's reduction, before the caller applies it."""
        def sync():
            backend.comm.broadcast_variables(sources, root_rank=0)
            return tf.no_op()
        tf.cond(tf.equal(self.calls, 0), sync, tf.no_op)
        if self.every:
            in_step(backend, sources, self.calls, self.every, self.verdict, IN_TAPE)
        self.calls.assign_add(1)


def source_guard(strategy, sources, every: int) -> SourceGuard:
    """The job's guard of this list of sources (one per list: a loop may differentiate
    against several). None on one rank: there is nothing to compare."""
    guards = strategy.source_guards
    key = tuple(id(s) for s in sources)
    if key not in guards:
        guards[key] = SourceGuard(every)
    return guards[key]


def restart_source_guards(strategy):
    """Every guard back to its first call, on every rank alike (after an elastic sync,
    a newcomer's guards start at 0 too, so all take the first-call broadcast together)."""
    for guard in strategy.source_guards.values():
        guard.calls.assign(0)


def verdicts(strategy, optimizer=None) -> list:
    """Every verdict a step of this job may have recorded: the optimizer's (the Keras
    path) and each tape guard's."""
    found = [g.verdict for g in strategy.source_guards.values()] if strategy else []
    own = getattr(optimizer, "verdict", None)
    return found + ([own] if isinstance(own, Verdict) else [])
