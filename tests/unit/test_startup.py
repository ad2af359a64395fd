"""startup.py: the phases to the first step, from marks on the process's clock."""
import itertools

import pytest

from horovod_train import startup


def _clock(*ages):
    ticks = iter(ages)
    return startup.StartupClock(age=lambda: next(ticks))


def test_phases_run_from_one_mark_to_the_next_and_add_up_to_the_last():
    clock = _clock(3.0, 3.25, 4.0, 4.5, 4.75, 6.0)
    for key in startup.KEYS:
        clock.mark(key)
    assert clock.done
    assert clock.seconds() == {"imports": 3.0, "join": 0.25, "data": 0.75, "model": 0.5,
                               "restore": 0.25, "first_step": 1.25, "total": 6.0}
    assert startup.from_row(clock.row()) == clock.seconds()


def test_a_phase_is_timed_once_and_unmarked_phases_are_left_out():
    clock = _clock(1.0, 2.0, 9.0)
    clock.mark("imports")
    clock.mark("join")
    clock.mark("join")  # an elastic ring re-forming does not start up again
    assert clock.ends == {"imports": 1.0, "join": 2.0}
    # The clock is read once per phase (the trainer marks at every step; reading the
    # process's age is a /proc read).
    assert clock.age() == 9.0
    assert not clock.done
    assert clock.seconds() == {"imports": 1.0, "join": 1.0, "total": 2.0}
    assert clock.row() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_a_skipped_phase_leaves_its_time_to_the_next():
    clock = _clock(1.0, 5.0)
    clock.mark("imports")
    clock.mark("data")  # no "join" mark: the data phase starts at the imports' end
    assert clock.seconds() == {"imports": 1.0, "data": 4.0, "total": 5.0}


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown start-up phase 'warmup'"):
        startup.StartupClock(age=itertools.count().__next__).mark("warmup")


def test_the_console_line_names_every_phase_with_its_share():
    seconds = {"imports": 3.0, "join": 0.0, "data": 0.5, "model": 0.25, "restore": 0.25,
               "first_step": 1.0, "total": 5.0}
    line = startup.line(seconds)
    assert line.startswith("start-up | 5.0 s to the first step: imports 3.0 s (60%) | ")
    for _, label in startup.PHASES:
        assert label in line
    assert "first step (tracing) 1.0 s (20%)" in line
