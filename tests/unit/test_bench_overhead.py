"""M1's report (bench/overhead.py): ours against model.fit as a user runs it and against
model.fit with the CPU allocator our program chooses, each with its own verdict."""
from bench import overhead


def _result(ours, fit, pooled=None):
    r = {"merged": {"ours": {"per_rank": [ours], "ranks": 1},
                    "keras_fit": {"per_rank": [fit], "ranks": 1}},
         "step_time_ratio": fit / ours, "target": overhead.TARGET, "jit_compile": False,
         "repeats": 1}
    if pooled is not None:
        r["merged"]["keras_fit_pooled"] = {"per_rank": [pooled], "ranks": 1}
        r.update(step_time_ratio_pooled=pooled / ours,
                 pooled_env={"TF_CPU_ALLOCATOR_USE_BFC": "true"})
    return r


def test_both_ratios_get_their_own_verdict():
    text = overhead.report(_result(ours=1000.0, fit=1010.0, pooled=1100.0))
    assert "step time ours / fit = 1.010 (target <= 1.02: met)" in text
    assert "step time ours / pooled fit = 1.100 (target <= 1.02: MISSED)" in text
    assert "model.fit, with our CPU allocator choice" in text
    assert "TF_CPU_ALLOCATOR_USE_BFC" in text


def test_a_result_from_before_the_pooled_arm_still_reports():
    text = overhead.report(_result(ours=1000.0, fit=1050.0))
    assert "step time ours / fit = 1.050 (target <= 1.02: MISSED)" in text
    assert "pooled fit =" not in text and "adds nothing" in text


def test_the_target_is_issue_23s():
    assert overhead.TARGET == 1.02
