"""The trainer's evaluation phase: this rank's shard of the test set, in rounds
(rounds.py, so a long evaluation is never taken for a stalled peer), with a progress
line now and then on the chief, then one reduction of the counts."""
import time

import keras
import tensorflow as tf
from absl import logging

from horovod_train import rounds
from horovod_train.data import sharding

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
             progress=None) -> tuple[float, float, int]:
    """(accuracy, mean loss, predictions) over every rank's shard of the test set.

    Each rank evaluates its shard in rounds (rounds.in_rounds), so a rank whose shard
    takes longer than the watchdog's bound is not taken for a stalled peer; then one
    reduction of the counts. Counts are per predicted label, so a language model's
    tokens count one by one; `progress` (a dict) holds this rank's count so far."""
    progress = {} if progress is None else progress

    def local_sums():
        correct = total = 0
        loss_sum = 0.0
        for x, y in dataset:
            logits = model(x, training=False)
            y = tf.cast(y, tf.int32)
            pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct += int(tf.reduce_sum(tf.cast(pred == y, tf.int32)))
            total += int(tf.size(y))
            losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            loss_sum += float(tf.reduce_sum(tf.cast(losses, tf.float64)))
            progress["predictions"] = total
        return [correct, total, loss_sum]
    mine = rounds.in_rounds(backend, local_sums, round_s, on_round)
    # Sum over ranks via mean * size: the interface keeps one reduction op.
    sums = backend.allreduce_mean(tf.constant(mine, tf.float64))
    correct, total, loss_sum = (float(v) * backend.info.size for v in sums.numpy())
    total = round(total)
    return round(correct) / max(total, 1), loss_sum / max(total, 1), total


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
