"""resume.plan: how a launch continues a checkpoint written by another number of ranks."""
import pytest

from horovod_train import resume
from horovod_train.errors import UsageError


def _written(ranks, batch, accum, scale=None, warmup=0, step=30):
    return resume.Written(step, ranks, batch, accum, float(scale or ranks), warmup)


def _launch(ranks, batch, accum=1, allow=False):
    return resume.Launch(ranks, batch, accum, float(ranks), allow)


def test_a_fresh_start_takes_the_launch_as_it_is():
    plan = resume.plan(None, _launch(4, 32, 2))
    assert plan == resume.Resumption(2, 4.0, None)


def test_the_same_sizes_change_nothing_and_keep_the_schedule():
    plan = resume.plan(_written(2, 32, 1, warmup=44), _launch(2, 32, 1))
    assert plan == resume.Resumption(1, 2.0, 44)
    assert plan.change is None


@pytest.mark.parametrize("written, launch, accum, words", [
    ((2, 32, 1), (1, 32), 2, "written by 2 ranks on 1 rank: accumulation 1 -> 2, "
                             "global batch 64 kept"),
    ((1, 32, 2), (2, 32), 1, "written by 1 rank on 2 ranks: accumulation 2 -> 1, "
                             "global batch 64 kept"),
    ((2, 16, 3), (3, 16), 2, "accumulation 3 -> 2, global batch 96 kept"),
    ((4, 8, 1), (1, 16), 2, "written by 4 ranks (batch 8) on 1 rank (batch 16): "
                            "accumulation 1 -> 2"),  # a new micro-batch too
])
def test_another_world_size_keeps_the_global_batch_by_accumulation(written, launch, accum,
                                                                    words):
    plan = resume.plan(_written(*written, warmup=10), _launch(*launch))
    assert plan.accum_steps == accum and not plan.global_batch_changed
    assert written[0] * written[1] * written[2] == launch[0] * launch[1] * accum
    # The learning rate is the checkpoint's: its multiplier and warmup, not this launch's.
    assert plan.lr_scale == float(written[0]) and plan.warmup_steps == 10
    assert words in plan.change


def test_flags_that_already_keep_the_global_batch_are_taken_as_given():
    plan = resume.plan(_written(2, 32, 1), _launch(1, 16, 4))
    assert plan.accum_steps == 4 and "global batch 64 kept" in plan.change


def test_a_global_batch_no_accumulation_keeps_is_refused_naming_what_would():
    with pytest.raises(UsageError) as err:
        resume.plan(_written(2, 32, 1), _launch(3, 32))
    text = str(err.value)
    assert "global batch 64 (2 ranks x batch 32 x accumulation 1)" in text
    assert "this launch has 3 ranks x batch 32" in text
    assert "1, 2 ranks at --batch_size=32" in text
    assert "Fix:" in text and "--allow_global_batch_change" in text


def test_the_refusal_offers_batch_sizes_when_the_world_size_divides_the_global_batch():
    with pytest.raises(UsageError, match=r"--batch_size in \{1, 2, 4, 8, 16\} on 4 ranks"):
        resume.plan(_written(2, 32, 1), _launch(4, 24))


def test_an_allowed_change_rescales_the_rate_linearly_and_keeps_the_warmup():
    plan = resume.plan(_written(2, 32, 1, warmup=44), _launch(3, 32, allow=True))
    assert plan.global_batch_changed and plan.accum_steps == 1
    assert plan.lr_scale == pytest.approx(2.0 * 96 / 64) and plan.warmup_steps == 44
    assert "global batch 64 -> 96" in plan.change and "x1.5" in plan.change


@pytest.mark.parametrize("g, batch, limit, sizes", [
    (64, 32, 8, [1, 2]), (96, 16, 8, [1, 2, 3, 6]), (64, 24, 8, []), (64, 1, 4, [1, 2, 4])])
def test_working_world_sizes(g, batch, limit, sizes):
    assert resume.working_world_sizes(g, batch, limit) == sizes


def test_working_batch_sizes():
    assert resume.working_batch_sizes(64, 2) == [1, 2, 4, 8, 16, 32]
    assert resume.working_batch_sizes(64, 3) == []
