"""Long work on one rank without a peer taking it for a stall.

The watchdog (watchdog.py) bounds how long a rank waits in a collective. A phase
without collectives (an evaluation over a rank's shard, the chief's checkpoint write)
can take longer than that bound on one rank while another waits for it at the next
collective, and the waiting rank would end the job for a peer that is only busy.

So such a phase runs in rounds: the work runs on a thread of its own, and every
`round_s` seconds every rank joins one small allreduce saying whether its work is done,
until all are. No rank waits in a collective longer than a round (plus the op in hand
when the round ends), each round is a sign of life (on_round: the watchdog's beat and
the progress line), and a rank that dies mid-phase still stops the rounds, so its peers'
watchdogs fire within their bound. Every rank runs the same rounds, whether it has work
or not (work=None), so the collectives line up. The rounds keep a phase alive, so they
cannot bound it: a checkpoint write's on_round does (write_bound.py), from the count of
rounds, which every rank agrees on.
"""
import threading
import time

import tensorflow as tf

ROUND_S_MAX = 10.0  # a round on a default bound (300 s): 30 of them fit in it
ROUNDS_PER_BOUND = 4  # a small bound (a test's 2 s) still sees 4 rounds


def round_seconds(bound_s: float) -> float:
    """How long a round lasts under a watchdog bound of `bound_s`."""
    return min(ROUND_S_MAX, bound_s / ROUNDS_PER_BOUND)


def in_rounds(backend, work, round_s: float, on_round=None):
    """work() (or nothing, when None) on a thread while every rank joins a round every
    round_s seconds, until every rank's work is done; returns work()'s result, or raises
    its error, after the last round. on_round(done_ranks, size, elapsed_s) after each."""
    outcome = {}

    def target():
        try:
            outcome["result"] = work()
        except BaseException as err:  # re-raised on the calling thread, after the rounds
            outcome["error"] = err
    thread = None
    if work is not None:
        thread = threading.Thread(target=target, name="local-phase", daemon=True)
        thread.start()
    started, size = time.monotonic(), backend.info.size
    while True:
        if thread is not None:
            thread.join(round_s)
        mine = 1.0 if thread is None or not thread.is_alive() else 0.0
        if size > 1:
            mine = float(backend.allreduce_mean(tf.constant([mine], tf.float64)).numpy()[0])
        done_ranks = round(mine * size)
        if on_round is not None:
            on_round(done_ranks, size, time.monotonic() - started)
        if done_ranks >= size:
            break
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
