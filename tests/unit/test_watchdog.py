"""The step watchdog's rules (a fake clock; the real thing is in test_faults.py)."""
import threading

import pytest

from horovod_train.watchdog import StepWatchdog, describe_peer_loss


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_not_armed_until_the_first_step_then_expires_after_the_timeout():
    clock = Clock()
    dog = StepWatchdog(30, rank=1, clock=clock)
    clock.now += 1000  # start-up (tracing, data set-up) is not bounded by it
    assert not dog.expired()
    dog.beat(7)
    clock.now += 30
    assert not dog.expired()
    clock.now += 0.5
    assert dog.expired()
    assert "rank 1" in dog.message() and "after step 7" in dog.message()
    assert "--collective_timeout_s" in dog.message() and "resume" in dog.message()


def test_each_beat_restarts_the_window_and_disarm_stops_it():
    clock = Clock()
    dog = StepWatchdog(10, rank=0, clock=clock)
    for step in range(5):
        dog.beat(step)
        clock.now += 9
        assert not dog.expired()
    dog.disarm()
    clock.now += 100
    assert not dog.expired()


def test_a_round_of_a_phase_without_steps_restarts_the_window_but_arms_nothing():
    clock = Clock()
    dog = StepWatchdog(10, rank=0, clock=clock)
    dog.alive()  # a round before the first step (a checkpoint restore's): still unarmed
    clock.now += 100
    assert not dog.expired()
    dog.beat(3)
    for _ in range(5):  # an evaluation's rounds, each within the bound
        clock.now += 8
        dog.alive()
        assert not dog.expired()
    clock.now += 10.5
    assert dog.expired() and "after step 3" in dog.message()


def test_the_thread_calls_on_expire_once():
    fired = []
    done = threading.Event()

    def on_expire(message):
        fired.append(message)
        done.set()

    dog = StepWatchdog(0.2, rank=3, on_expire=on_expire).start()
    dog.beat(1)
    assert done.wait(5)
    dog.stop()
    assert len(fired) == 1 and "rank 3" in fired[0]


class UnavailableError(Exception):
    """Stands in for tf.errors.UnavailableError: matched by class name, no TF import."""


class UnknownError(Exception):
    pass


class FailedPreconditionError(Exception):
    pass


def test_peer_loss_is_recognised_and_names_the_lost_task():
    err = UnavailableError("Collective ops is aborted by: Error reported from /job:worker/task:1: "
                           "The following tasks are unhealthy (stopped sending heartbeats):\n"
                           "/job:worker/replica:0/task:1\nmore graph context")
    line = describe_peer_loss(err)
    assert "(lost: /job:worker/task:1)" in line  # one task, however TF spells it
    assert "\n" not in line and "resume" in line


def test_the_survivor_is_not_named_among_the_lost():
    """Issue 17: MWMS's error names this rank's own task too (the op's devices)."""
    err = UnavailableError("Collective ops is aborted by: Error reported from "
                           "/job:worker/replica:0/task:0/device:CPU:0 while waiting for "
                           "/job:worker/replica:0/task:1: connection reset; also task:10 is "
                           "/job:worker/replica:0/task:10")
    line = describe_peer_loss(err, own_rank=0)
    assert "(lost: /job:worker/task:1, /job:worker/task:10)" in line
    assert "(lost: /job:worker/task:0" not in line and "task:0," not in line


def test_other_errors_are_not_called_peer_loss():
    assert describe_peer_loss(ValueError("bad shape")) is None
    assert describe_peer_loss(UnknownError("some kernel failed")) is None
    assert describe_peer_loss(UnknownError("HorovodAllreduce failed: connection closed")) is not None


def test_our_own_file_names_in_the_node_stack_do_not_make_an_error_a_peer_loss():
    """TF appends the failing node's Python stack, which names horovod_train/...: a
    local error must not be reported as a lost peer (exit 75) because of that."""
    text = ("Graph execution error:\n\nDetected at node Timestamp defined at (most recent "
            "call last):\n  File \"/home/user/src/horovod_train/loop.py\", line 184, in _one_step\n\n"
            "Timestamp cannot be called when determinism is enabled\n\t [[{{node Timestamp}}]]")
    assert describe_peer_loss(FailedPreconditionError(text)) is None
    lost = describe_peer_loss(UnknownError(text.replace(
        "Timestamp cannot", "Horovod has been shut down; Timestamp cannot")))
    assert lost is not None and ": Horovod has been shut down; Timestamp cannot" in lost


def test_a_rank_that_was_itself_stopped_says_so_not_a_peer():
    """Issue 55 items 5 and 9: the chief SIGSTOPped mid-write then SIGCONTed saw the gap
    itself and blamed "a peer". Its watchdog thread's own clock jumped between two polls
    of 1 s: that is this rank standing still."""
    clock = Clock()
    dog = StepWatchdog(8, rank=0, clock=clock, size=2)
    dog.beat(20)
    with dog.where.entering("the checkpoint write's rounds", 20):
        for _ in range(3):  # the thread polls every second while the rank runs
            clock.now += 1.0
            dog.polled(1.0)
        clock.now += 40.0  # SIGSTOP ... SIGCONT: the thread wakes 40 s late
        dog.polled(1.0)
        assert dog.expired()
        line = dog.message()
    assert line.startswith("rank 0: no collective with the peers finished for 8 s")
    assert "this rank itself was stopped or stalled for 39 s" in line
    assert "peer rank has died" not in line and "resume" in line


def test_a_rank_waiting_in_a_collective_names_its_peer_and_where_it_waited():
    clock = Clock()
    dog = StepWatchdog(8, rank=1, clock=clock, size=2)
    dog.beat(20)
    with dog.where.entering("the final evaluation's rounds", 20):
        for _ in range(9):  # polled on time: this rank ran; its peer did not answer
            clock.now += 1.0
            dog.polled(1.0)
        assert dog.expired()
        line = dog.message()
    assert "this rank waited in the final evaluation's rounds (step 20)" in line
    assert "rank 0, its peer, has died or stalled" in line and "itself" not in line


def test_a_rank_in_no_collective_says_its_own_work_took_the_time():
    """Armed, polled on time, in no collective: the peers wait for THIS rank (its own
    local work between collectives ran past the bound)."""
    clock = Clock()
    dog = StepWatchdog(8, rank=0, clock=clock, size=3)
    dog.beat(5)
    for _ in range(9):
        clock.now += 1.0
        dog.polled(1.0)
    assert dog.expired()
    assert "this rank itself was in no collective" in dog.message()


def test_a_short_hiccup_or_an_old_gap_is_not_called_a_stop():
    """A gap under half the bound, or one before the last beat, leaves the peer wording."""
    clock = Clock()
    dog = StepWatchdog(8, rank=0, clock=clock, size=4)
    clock.now += 30.0  # stopped before the last beat: a beat since says all is well
    dog.polled(1.0)
    dog.beat(3)
    with dog.where.entering("the step's gradient allreduce", 4):
        clock.now += 3.5  # 2.5 s late: under half of 8 s
        dog.polled(1.0)
        for _ in range(6):
            clock.now += 1.0
            dog.polled(1.0)
        assert dog.expired()
        line = dog.message()
    assert "a peer rank has died or stalled" in line and "itself" not in line


def test_every_collective_that_finishes_restarts_the_window():
    """Issue 55 item 5, the end-of-run stall: after the last step's beat come the
    interval's gather, the ranks' weight check (its first one in a resumed run, traced
    there first: slow on a loaded host) and the checkpoint write's first round. Each
    finished well within the bound, but the watchdog counted only steps and rounds, so
    their waits added up past it and both ranks ended, though no peer had stalled."""
    clock = Clock()
    dog = StepWatchdog(30, rank=0, clock=clock)
    dog.beat(20)
    for name in ("the interval's metrics gather", "the ranks' weight check",
                 "the checkpoint write's rounds"):
        with dog.where.entering(name, 20):
            clock.now += 20  # waits on the peer, which finishes its own work first
        assert not dog.expired(), name
    clock.now += 29
    assert not dog.expired()
    with pytest.raises(RuntimeError):  # a collective that fails is no sign of life
        with dog.where.entering("the final evaluation's rounds", 20):
            clock.now += 2
            raise RuntimeError("peer lost")
    assert dog.expired()
