"""horovod_train/__main__.py's exit on a lost peer, when the watchdog is already ending the
process: the rank prints nothing of its own (the watchdog has said why), waits for the
watchdog's exit, and leaves with the peer-lost code should that exit never come."""
import time

import pytest

import horovod_train.__main__ as main
from horovod_train import console, watchdog


class Left(Exception):
    pass


def test_a_rank_the_watchdog_is_ending_waits_for_it_silently(monkeypatch):
    slept, printed = [], []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(console, "last_line", printed.append)

    def leave(code, message=None):
        raise Left(code, message)

    monkeypatch.setattr(main, "_leave", leave)
    watchdog.ENDING.set()
    try:
        with pytest.raises(Left) as left:
            main._leave_peer_lost("a peer rank was lost: AbortedError")
    finally:
        watchdog.ENDING.clear()
    assert left.value.args == (watchdog.EXIT_PEER_LOST, None)
    assert slept == [60] and printed == []
