"""The trainer's evaluation phase: this rank's shard of the test set, in rounds
(rounds.py, so a long evaluation is never taken for a stalled peer), with a progress
line now and then on the chief, then one reduction of the counts."""
import functools
import time

import keras
import tensorflow as tf
from absl import logging

from horovod_train import rounds
from horovod_train.data import sharding

# Op by op, a 2-block decoder LM's evaluation was slower per sample than its training steps
# (forward and backward, traced): 10.2 s for 1,112 sequences on one thread, against 1.6 s
# with the batch's computation traced, the tracing included (issue 64). Tracing costs a
# digits CNN 0.3 s, the time of about 30 of its eager batches, more than its whole test
# set. So a shard's first EAGER_BATCHES batches run eagerly and the rest as one traced
# function: a small test set never pays for the tracing, a large one stops paying per op.
EAGER_BATCHES = 32
# A phase without collectives that lasts longer than this (or than the watchdog's
# bound) prints a line now and then, so a long evaluation is not taken for a hang.
PROGRESS_EVERY_S = 60.0


def evaluate_shard(model, data, backend, label: str, *, batch_size: int, bound_s: float,
                   alive, delay_s: float = 0.0) -> tuple[float, float, int]:
    """(accuracy, mean loss, predictions) over every rank's shard, in batches of
    `batch_size` (the training's per-rank batch: what fits in a training step fits
    here, where a fixed 256 sequences took a 124M-parameter LM's ranks to 3.8 GB, 2.9
    with the training's 2). alive() after each round (the watchdog's); delay_s:
    --inject_delay's slow shard (tests)."""
    info = backend.info
    ds = data.eval_dataset(sharding.ShardInfo(info.rank, info.size), batch_size)
    if delay_s:
        ds = _after_sleeping(delay_s, ds)
    progress = {}
    return evaluate(model, ds, backend, rounds.round_seconds(bound_s),
                    _on_round(label, progress, min(bound_s, PROGRESS_EVERY_S), alive), progress)


def evaluate(model, dataset, backend, round_s: float = rounds.ROUND_S_MAX, on_round=None,
             progress=None, eager_batches: int = EAGER_BATCHES) -> tuple[float, float, int]:
    """(accuracy, mean loss, predictions) over every rank's shard of the test set.

    Each rank evaluates its shard in rounds (rounds.in_rounds), so a rank whose shard
    takes longer than the watchdog's bound is not taken for a stalled peer; then one
    reduction of the counts. Counts are per predicted label, so a language model's
    tokens count one by one; `progress` (a dict) holds this rank's count so far."""
    progress = {} if progress is None else progress

    def local_sums():
        correct = total = 0
        loss_sum = 0.0
        sums = functools.partial(batch_sums, model)
        for index, (x, y) in enumerate(dataset):
            if index == eager_batches:
                sums = tf.function(sums, reduce_retracing=True)
            right, count, losses = sums(x, y)
            correct += int(right)
            total += int(count)
            loss_sum += float(losses)
            progress["predictions"] = total
        return [correct, total, loss_sum]
    mine = rounds.in_rounds(backend, local_sums, round_s, on_round)
    # Sum over ranks via mean * size: the interface keeps one reduction op.
    sums = backend.allreduce_mean(tf.constant(mine, tf.float64))
    correct, total, loss_sum = (float(v) * backend.info.size for v in sums.numpy())
    total = round(total)
    return round(correct) / max(total, 1), loss_sum / max(total, 1), total


def batch_sums(model, x, y):
    """(correct predictions, predictions, summed loss) of the model on one batch."""
    logits = model(x, training=False)
    y = tf.cast(y, tf.int32)
    pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
    losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    return (tf.reduce_sum(tf.cast(pred == y, tf.int64)), tf.size(y, out_type=tf.int64),
            tf.reduce_sum(tf.cast(losses, tf.float64)))


def _on_round(label, progress, every: float, alive):
    """Each round: a beat (the peers are there), and every `every` seconds a line."""
    shown = [every]

    def on_round(done_ranks, size, elapsed):
        alive()
        if elapsed < shown[0]:
            return
        shown[0] = elapsed + every
        logging.info("eval  | %s | still evaluating after %.0f s: %s predictions on this "
                     "rank; %d of %d ranks done", label, elapsed,
                     f"{progress.get('predictions', 0):,}", done_ranks, size)
    return on_round


def _after_sleeping(seconds: float, batches):
    """`batches`, the first of them `seconds` late."""
    time.sleep(seconds)
    yield from batches
