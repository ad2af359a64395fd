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
"""
import tensorflow as tf
from absl import logging

from horovod_train import divergence
from horovod_train.backends.comm import ReduceOp


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


def in_step(backend, variables, iterations, every: int):
    """Inside a tf.function: on updates that are multiples of `every`, every rank's
    checksum (one SUM-allreduce of a [size, 2] table holding this rank's row: adding
    zeros is exact), then the verdict, which raises on every rank alike."""
    size, rank = backend.info.size, backend.info.rank
    ops = backend.comm
    due = tf.logical_and(iterations > 0, tf.equal(iterations % every, 0))

    def check():
        local = divergence.checksum(variables)
        table = tf.scatter_nd([[rank]], tf.reshape(local, [1, 2]), [size, 2])
        rows = ops.allreduce(table, ReduceOp.SUM)
        tf.py_function(_verdict, [rows, iterations], [])
        return tf.no_op()
    tf.cond(due, check, tf.no_op)


def _verdict(rows, step):
    ranks = divergence.differing_ranks(rows.numpy())
    if ranks:
        err = divergence.RanksDiverged(ranks, int(step.numpy()),
                                       "an in-step check of DistributedOptimizer")
        logging.error("%s", err)
        raise err
