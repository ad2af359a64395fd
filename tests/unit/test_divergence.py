"""The divergence guard's pure parts (no TensorFlow): which ranks differ from rank 0 in
a table of checksums, the one line that says so, and --divergence_check_steps."""
import numpy as np
import pytest

from horovod_train import config as cfg
from horovod_train import divergence
from horovod_train.errors import UsageError


def _rows(*pairs):
    return np.array(pairs, np.float64)


def test_identical_rows_differ_nowhere():
    assert divergence.differing_ranks(_rows([1.5, 2.25], [1.5, 2.25], [1.5, 2.25])) == []


def test_one_rank_is_a_table_of_one_row():
    assert divergence.differing_ranks(_rows([3.0, 9.0])) == []


def test_every_rank_that_differs_from_rank_0_is_named():
    rows = _rows([1.0, 1.0], [1.0, 1.0], [1.0 + 1e-3, 1.0], [1.0, 2.0])
    assert divergence.differing_ranks(rows) == [2, 3]


def test_one_bit_is_a_difference():
    nudged = np.nextafter(7.0, 8.0)
    assert divergence.differing_ranks(_rows([7.0, 49.0], [nudged, 49.0])) == [1]
    assert divergence.differing_ranks(_rows([7.0, 49.0], [7.0, np.nextafter(49.0, 0)])) == [1]


def test_nan_everywhere_is_not_a_difference():
    # NaN != NaN as floats; the same bits on every rank are the same weights.
    assert divergence.differing_ranks(_rows([np.nan, np.nan], [np.nan, np.nan])) == []


def test_when_rank_0_is_the_odd_one_every_other_rank_is_named():
    assert divergence.differing_ranks(_rows([2.0, 4.0], [1.0, 1.0], [1.0, 1.0])) == [1, 2]


def test_the_message_is_one_line_naming_ranks_step_place_causes_and_the_stop():
    text = divergence.message([1], 44, "epoch 2 end")
    assert "\n" not in text
    for fragment in ("rank 1", "rank 0", "step 44", "epoch 2 end",
                     "optimizer", "rank-local file", "broadcast",
                     "non-deterministic ops are not a cause",
                     "job stops", "different models", "Fix:"):
        assert fragment in text, (fragment, text)


def test_the_message_lists_several_ranks_and_shortens_a_long_list():
    assert "ranks 1, 3" in divergence.message([1, 3], 5, "step 5")
    many = divergence.message(list(range(1, 200)), 5, "step 5")
    assert "ranks 1, 2, 3" in many and "199 ranks" in many and "150" not in many


def test_ranks_diverged_carries_its_facts_and_reads_as_the_message():
    err = divergence.RanksDiverged([2], 30, "epoch 1 end")
    assert isinstance(err, RuntimeError)
    assert (err.ranks, err.step) == ([2], 30)
    assert str(err) == divergence.message([2], 30, "epoch 1 end")


def test_the_exit_code_is_new():
    # 1 crash, 2 bad input, 3 non-finite, 75 peer lost, 130 interrupt, 143 SIGTERM.
    assert divergence.EXIT_RANKS_DIVERGED == 4


def test_the_check_interval_defaults_to_epoch_ends_only():
    assert cfg.TrainConfig().divergence_check_steps == 0
    assert cfg.TrainConfig(divergence_check_steps=50).divergence_check_steps == 50


@pytest.mark.parametrize("value", [-1, -100])
def test_a_negative_check_interval_is_refused(value):
    with pytest.raises(UsageError) as err:
        cfg.TrainConfig(divergence_check_steps=value)
    text = str(err.value)
    assert text.startswith(f"--divergence_check_steps: received {value}; expected ")
    assert "0 (epoch ends only)" in text and "Fix: pass --divergence_check_steps=0" in text


def test_the_flag_reaches_the_config():
    from absl import flags
    from horovod_train import flags as ht_flags
    fv = flags.FlagValues()
    ht_flags.define_flags(fv)
    fv(["horovod_train", "--divergence_check_steps=25"])
    assert ht_flags.config_from_flags(fv).train.divergence_check_steps == 25
    fv(["horovod_train", "--divergence_check_steps=-3"])
    with pytest.raises(UsageError, match="--divergence_check_steps: received -3"):
        ht_flags.config_from_flags(fv)


def test_the_pure_parts_need_no_tensorflow():
    import subprocess
    import sys
    from helpers import ROOT, child_env
    code = ("import sys; from horovod_train import divergence; "
            "divergence.message(divergence.differing_ranks([[1.0, 1.0], [2.0, 2.0]]), 1, 'x'); "
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=child_env())


def test_an_epoch_end_is_compared_first_and_then_when_it_crossed_min_steps():
    gap = divergence.MIN_STEPS_BETWEEN_EPOCH_CHECKS
    assert divergence.epoch_end_due(11, 11, first=True)  # the first epoch end, however short
    ends = [e * 22 for e in range(2, 30)]  # 22-step epochs, after the first
    due = [step for step in ends if divergence.epoch_end_due(step, 22, first=False)]
    assert due == [110, 220, 308, 418, 506, 616]  # the epochs that crossed 100, 200, ...
    assert all(b - a <= gap + 22 for a, b in zip(due, due[1:]))
    assert divergence.epoch_end_due(5000, None, first=False)  # length unknown: every end


def test_the_epoch_end_rule_reads_the_position_only():
    """A rank that joined an elastic ring mid-run has no history of checks: it must
    decide as the ranks that have (the rule takes nothing but the position)."""
    import inspect
    assert list(inspect.signature(divergence.epoch_end_due).parameters) == [
        "step", "epoch_steps", "first"]
