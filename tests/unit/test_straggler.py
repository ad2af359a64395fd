"""observe/straggler.py: one rank slowest in most intervals, by enough, is named once."""
import pytest

from horovod_train import metrics
from horovod_train.observe import straggler


def _record(waits, slowest, step_s=1.0, traced=False):
    return {"wait_s_per_rank": waits, "slowest_rank": slowest, "step_s": step_s,
            "traced": traced}


def test_own_time_leaves_out_the_waits_and_the_slowest_is_waited_for():
    per_step = {"data": 0.1, "compute": 0.5, "comm": 2.0, "optimizer": 0.1, "sync": 0.3,
                "other": 0.2}
    assert metrics.own_seconds(per_step) == pytest.approx(0.9)
    waited, slowest = metrics.waits([0.9, 2.9, 1.4])
    assert waited == pytest.approx([2.0, 0.0, 1.5]) and slowest == 1


def test_a_rank_slowest_in_most_intervals_by_a_real_margin_is_named_once():
    watch = straggler.StragglerWatch(4)
    assert watch.add(_record([0.4] * 4, 3, traced=True)) is None  # tracing says nothing
    lines = [watch.add(_record([0.4, 0.4, 0.5, 0.0], 3)) for _ in range(2)]
    assert lines == [None, None]  # not yet MIN_INTERVALS
    line = watch.add(_record([0.4, 0.3, 0.5, 0.0], 3))
    assert line == "rank 3 slowest in 3 of 3 intervals: the others wait 400 ms a step for " \
                   "it, 40% of the step"
    assert watch.add(_record([0.4, 0.4, 0.4, 0.0], 3)) is None  # said once
    assert watch.verdict().startswith("rank 3 slowest in 4 of 4 intervals")


def test_equal_ranks_trading_places_or_small_waits_are_not_named():
    watch = straggler.StragglerWatch(2)
    for i in range(8):  # slowest by turns
        assert watch.add(_record([0.0, 0.3] if i % 2 else [0.3, 0.0], 1 - i % 2)) is None
    small = straggler.StragglerWatch(2)
    for _ in range(8):  # always rank 1, but the others wait 5% of a step
        assert small.add(_record([0.05, 0.0], 1)) is None
    assert straggler.StragglerWatch(1).add(_record([0.0], 0)) is None


def test_tensorboard_gets_each_ranks_wait_in_ms():
    assert straggler.wait_tags(2) == ("straggler/wait_ms_rank0", "straggler/wait_ms_rank1")
    assert straggler.wait_tags(1) == ()
    assert straggler.wait_scalars(_record([0.25, 0.0], 1)) == {
        "straggler/wait_ms_rank0": 250.0, "straggler/wait_ms_rank1": 0.0}
