"""data/layouts.py and EpochGrid.place: where a run continues an epoch begun in other
layouts (pure; the records themselves are checked in tests/tf/test_data_sources.py)."""
import pytest

from horovod_train.data.layouts import Layout, closing, from_record, needs_rest, to_record
from horovod_train.grid import epoch_grid


def test_a_layout_holds_whole_global_batches():
    assert Layout(2, 32, 128).per_rank == 64
    with pytest.raises(ValueError, match="whole global batches"):
        Layout(2, 32, 100)


def test_closing_adds_this_launchs_own_examples_and_records_round_trip():
    earlier = (Layout(2, 32, 128),)
    assert closing(earlier, 1, 64, 128) == earlier  # nothing trained in this layout yet
    done = closing(earlier, 1, 64, 320)
    assert done == (Layout(2, 32, 128), Layout(1, 64, 192))
    position = {"epoch": 3, "epoch_examples": 320, "layouts": to_record(done)}
    assert from_record(position, Layout(1, 64, 0)) == done


@pytest.mark.parametrize("position", [
    {"epoch": 3, "epoch_examples": 320},  # older checkpoints: no layouts
    {"epoch": 3, "epoch_examples": 320, "layouts": [[2, 32, 128]]},  # does not add up
    {"epoch": 3, "epoch_examples": 320, "layouts": [[2, 32, "x"]]},
    {"epoch": 3, "epoch_examples": 320, "layouts": [[2, 32, 100, 5]]}])
def test_a_position_without_usable_layouts_was_trained_in_the_writers(position):
    assert from_record(position, Layout(2, 32, 0)) == (Layout(2, 32, 320),)
    assert from_record({"epoch": 3, "epoch_examples": 0}, Layout(2, 32, 0)) == ()


def test_only_an_epoch_begun_in_another_layout_needs_its_rest():
    assert not needs_rest((), 2, 32)
    assert not needs_rest((Layout(2, 32, 128),), 2, 32)  # skipping its own steps is exact
    assert needs_rest((Layout(2, 32, 128),), 1, 64)
    assert needs_rest((Layout(2, 32, 128), Layout(1, 64, 64)), 1, 64)  # began otherwise


def test_the_grid_places_a_rest_by_its_untrained_records():
    grid = epoch_grid(1000, 96, 1, epochs=4)  # 10 steps an epoch, 40 examples dropped
    begun = (Layout(2, 32, 320),)  # 5 steps of 2 x 32 (global batch 64)
    placed = grid.place(1, 320, begun, exact_rest=True)
    assert (placed.epoch, placed.examples, placed.earlier) == (1, 320, begun)
    assert grid.per_epoch - placed.in_epoch == (1000 - 320) // 96 == 7
    assert "680 records not yet trained (320 were, in other layouts)" in placed.note(grid, 320)
    # Without an exact rest: rounded down to this grid's global batch, and said so.
    rounded = grid.place(1, 320, begun, exact_rest=False)
    assert (rounded.in_epoch, rounded.examples, rounded.repeated) == (3, 288, 32)
    assert "the last 32 are trained on again" in rounded.note(grid, 320)
    # Fewer than a global batch left: the epoch is over.
    over = grid.place(1, 960, (Layout(2, 32, 960),), exact_rest=True)
    assert (over.epoch, over.in_epoch, over.examples, over.earlier) == (2, 0, 0, ())


def test_an_epoch_ends_when_less_than_a_global_batch_is_left():
    grid = epoch_grid(1000, 96, 1, epochs=4)
    assert not grid.ended(904) and grid.ended(905) and grid.ended(960)
    assert [grid.ended(k * 96) for k in range(1, 11)] == [False] * 9 + [True]
