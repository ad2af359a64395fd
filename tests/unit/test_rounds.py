"""rounds.in_rounds: a phase without collectives, run on a thread while every rank
joins a small reduction each round (the real thing, with ranks, is
tests/multiprocess/test_local_phases.py)."""
import threading
import time

import pytest

pytest.importorskip("tensorflow")
from horovod_train import rounds  # noqa: E402
from horovod_train.backends.base import ProcessInfo  # noqa: E402


class OneRank:
    info = ProcessInfo(rank=0, size=1)


class PeersDoneAfter:
    """Two ranks, this one and a peer whose work ends after `rounds_busy` rounds: the
    reduction reports the mean of the done flags."""

    def __init__(self, rounds_busy):
        self.info = ProcessInfo(rank=0, size=2)
        self.rounds_busy, self.calls = rounds_busy, 0

    def allreduce_mean(self, value):
        self.calls += 1
        peer = 1.0 if self.calls > self.rounds_busy else 0.0
        return value * 0.5 + peer * 0.5


def test_rounds_run_until_the_work_is_done_and_return_its_result():
    seen = []
    result = rounds.in_rounds(OneRank(), lambda: time.sleep(0.35) or 42, 0.1,
                              lambda done, size, elapsed: seen.append((done, size)))
    assert result == 42
    assert len(seen) >= 3 and seen[-1] == (1, 1) and set(seen[:-1]) == {(0, 1)}


def test_a_rank_without_work_keeps_joining_rounds_until_its_peer_is_done():
    backend, seen = PeersDoneAfter(rounds_busy=3), []
    assert rounds.in_rounds(backend, None, 0.01, lambda d, s, e: seen.append(d)) is None
    assert backend.calls == 4 and seen == [1, 1, 1, 2]


def test_the_works_error_is_raised_after_the_rounds_on_the_calling_thread():
    def work():
        assert threading.current_thread().name == "local-phase"
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        rounds.in_rounds(OneRank(), work, 0.05)


def test_a_round_fits_the_watchdogs_bound_several_times():
    assert rounds.round_seconds(300) == rounds.ROUND_S_MAX
    assert rounds.round_seconds(2) == 0.5
