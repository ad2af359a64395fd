"""Mixed precision, accumulation, buckets and compression on real ranks, on both backends.

The horovod tests compare against the shared Gloo reference (tests/scenarios.py,
REFERENCE): each of their runs changes only the lever under test, and all of them are
jobs of one launch (the gloo_trainers session, GLOO_TRAINER_RUNS). An fp16 step that
rank 1 alone finds non-finite is skipped by every rank: under horovod on the divergence
guard's healthy run (test_divergence_ranks), under XLA in test_xla_ranks, and under MWMS
here, on the run that also cuts its gradients into buckets."""
import pytest

from ranks import assert_ranks_identical, run_workers
from scenarios import (BUCKETS, INJECT, REFERENCE_STEPS, SHORT, assert_same_weights,
                       check_injected_skip)


def _lever_runs(gloo_trainers, names) -> dict:
    """{name: Job} of the gloo_trainers runs `names` (tests/scenarios.py,
    GLOO_TRAINER_RUNS: the reference's flags changed by each lever), on 2 Gloo ranks."""
    runs = {name: gloo_trainers.trainer_run(name) for name in names}
    for job in runs.values():
        assert_ranks_identical(job.summary, job.run_dir, 2)
        assert job.summary["steps"] == REFERENCE_STEPS
    return runs


def test_accumulation_one_allreduce_per_step_and_same_update(gloo_trainers, gloo_reference):
    """k micro-batches of b on 2 ranks == k=1 with batch k*b (the reference: b=16);
    collectives per step do not grow."""
    runs = _lever_runs(gloo_trainers, ("k2", "k4"))
    summaries = [gloo_reference.summary] + [job.summary for job in runs.values()]
    assert {run["grad_accum_steps"] for run in summaries} == {1, 2, 4}
    assert {run["collective_ops_per_step"] for run in summaries} == {1}
    assert {run["global_batch"] for run in summaries} == {32}
    for job in runs.values():
        assert_same_weights(gloo_reference.weights(), job.weights())


def test_buckets_are_several_collectives_with_the_same_update(gloo_trainers, gloo_reference):
    """Gradients reduced in buckets as backprop produces them: more collectives per step,
    the same update as one grouped call (the reference: unset under Gloo on shared CPU
    cores is one call), identical ranks; with accumulation still one reduction per
    optimizer step (k=2 of b equals k=1 of 2b)."""
    runs = _lever_runs(gloo_trainers, ("buckets", "buckets_k2"))
    counts = {name: job.summary["collective_ops_per_step"] for name, job in runs.items()}
    assert counts == {"buckets": 3, "buckets_k2": 3}, counts
    assert gloo_reference.summary["collective_ops_per_step"] == 1
    for job in runs.values():
        assert_same_weights(gloo_reference.weights(), job.weights())


def test_unset_bucket_size_under_gloo_is_one_call_after_backprop(gloo_reference):
    """No --allreduce_bucket_mb: 2 CPU ranks on one host reduce once after backprop under
    Gloo, logged on the config line (the user's value wins: the buckets test above). Under
    MPI the same default is 4 MiB buckets: test_horovod_ranks' MPI job."""
    summary = gloo_reference.summary
    assert "backend horovod 0.28.1 patched " in summary["_stderr"]
    assert " (compression none, gradients in one grouped allreduce" in summary["_stderr"]
    assert summary["config"]["speed"]["allreduce_bucket_mb"] is None
    assert summary["collective_ops_per_step"] == 1
    assert_ranks_identical(summary, gloo_reference.run_dir, 2)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_horovod_compression_halves_bytes_and_converges(compression, gloo_trainers,
                                                        gloo_reference):
    packed = gloo_trainers.trainer_run(f"compression_{compression}")
    # What travels per step depends on the model and the compression only.
    assert packed.summary["wire_bytes_per_step"] * 2 == \
        gloo_reference.summary["wire_bytes_per_step"]
    assert packed.summary["test_accuracy"] >= 0.93
    assert f"(compression {compression}, " in packed.summary["_stderr"]
    assert_ranks_identical(packed.summary, packed.run_dir, 2)


def test_mwms_skips_an_agreed_nonfinite_step_and_packs_gradients_in_buckets(tmp_path):
    """One MWMS run: rank 1 alone sees inf at step 5 and both workers skip it; the
    gradients travel in several packs (TF cuts them by CommunicationOptions.bytes_per_pack,
    one per bucket of ours). The finite verdict needs no collective of its own."""
    summary, _ = run_workers(SHORT + INJECT + ["--backend=mwms", BUCKETS], tmp_path)
    assert summary["collective_ops_per_step"] > 1
    check_injected_skip(summary, tmp_path)


def test_mwms_accumulation_keeps_collectives_per_step_and_fp16_halves_bytes(tmp_path):
    """One packed gradient all-reduce per step whatever k is, and fp16 compression sends
    2 bytes per value: digits_cnn's parameters and the stop vote."""
    summaries = {}
    for k in (1, 4):
        summaries[k], _ = run_workers(SHORT + ["--backend=mwms", "--compression=fp16",
                                               f"--grad_accum_steps={k}", f"--batch_size={16 // k}"],
                                      tmp_path / f"k{k}")
        assert_ranks_identical(summaries[k], tmp_path / f"k{k}", 2)
    assert summaries[1]["collective_ops_per_step"] == summaries[4]["collective_ops_per_step"] == 1
    assert summaries[1]["wire_bytes_per_step"] == (151306 + 1) * 2
