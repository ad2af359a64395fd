"""Mixed precision, accumulation and compression on real ranks, on both backends."""
import numpy as np
import pytest

from ranks import assert_ranks_identical, horovodrun, load_weights, run_ranks
from test_mwms_workers import run_workers

pytestmark = pytest.mark.slow
SHORT = ["--max_steps=12", "--log_every=6", "--eval_every_epochs=0"]
INJECT = ["--precision=mixed_float16", "--inject_nonfinite=5@1"]


def _hvd():
    pytest.importorskip("horovod.tensorflow")


def _check_injected_skip(summary, run_dir):
    # Rank 1 alone saw inf; the agreed verdict made BOTH skip (else digests differ).
    assert summary["skipped_steps"] == 1
    assert summary["loss_scale"] == 2.0 ** 14  # halved once from 2**15
    assert summary["steps"] == 12
    assert_ranks_identical(summary, run_dir, 2)


def test_inf_on_one_rank_is_skipped_by_all_under_horovod(tmp_path):
    _hvd()
    _check_injected_skip(run_ranks(horovodrun(2, "gloo", SHORT + INJECT), tmp_path), tmp_path)


def test_inf_on_one_rank_is_skipped_by_all_under_mwms(tmp_path):
    summary, _ = run_workers(SHORT + INJECT + ["--backend=mwms"], tmp_path)
    _check_injected_skip(summary, tmp_path)


def test_accumulation_one_allreduce_per_step_and_same_update(tmp_path):
    """k micro-batches of b on 2 ranks == k=1 with batch k*b; collectives per step do not grow."""
    _hvd()
    common = ["--optimizer=sgd", "--learning_rate=0.05", "--max_steps=15", "--log_every=5",
              "--eval_every_epochs=0", "--deterministic"]
    runs = {}
    for k in (1, 2, 4):
        run_dir = tmp_path / f"k{k}"
        runs[k] = run_ranks(horovodrun(2, "gloo", common + [f"--grad_accum_steps={k}",
                                                           f"--batch_size={16 // k}"]), run_dir)
        assert_ranks_identical(runs[k], run_dir, 2)
    assert {runs[k]["collective_ops_per_step"] for k in runs} == {1}
    assert {runs[k]["global_batch"] for k in runs} == {32}
    for k in (2, 4):
        for a, b in zip(load_weights(tmp_path / "k1"), load_weights(tmp_path / f"k{k}")):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


BUCKETS = "--allreduce_bucket_mb=0.05"  # digits_cnn's 0.6 MiB of gradients in 3 buckets


def test_buckets_are_several_collectives_with_the_same_update(tmp_path):
    """Gradients reduced in buckets as backprop produces them: more collectives per step,
    the same update as one grouped call, identical ranks; with accumulation still one
    reduction per optimizer step (k=2 of b equals k=1 of 2b)."""
    _hvd()
    common = ["--optimizer=sgd", "--learning_rate=0.05", "--max_steps=10", "--log_every=5",
              "--eval_every_epochs=0", "--deterministic"]
    cases = {"one call": ["--allreduce_bucket_mb=0", "--batch_size=16"],
             "buckets": [BUCKETS, "--batch_size=16"],
             "buckets k=2": [BUCKETS, "--grad_accum_steps=2", "--batch_size=8"]}
    runs = {}
    for name, extra in cases.items():
        run_dir = tmp_path / name.replace(" ", "_").replace("=", "")
        runs[name] = run_ranks(horovodrun(2, "gloo", common + extra), run_dir)
        assert_ranks_identical(runs[name], run_dir, 2)
        runs[name]["weights"] = load_weights(run_dir)
    counts = {name: run["collective_ops_per_step"] for name, run in runs.items()}
    assert counts == {"one call": 1, "buckets": 3, "buckets k=2": 3}, counts
    for name in ("buckets", "buckets k=2"):
        for a, b in zip(runs["one call"]["weights"], runs[name]["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("controller, chosen", [
    ("gloo", "gradients in one grouped allreduce"), ("mpi", "gradient buckets of 4 MiB")])
def test_unset_bucket_size_follows_the_controller_on_shared_cpu_cores(tmp_path, controller,
                                                                       chosen):
    """No --allreduce_bucket_mb: 2 CPU ranks on one host reduce once after backprop under
    Gloo and in 4 MiB buckets under MPI, each logged on the config line (the user's value
    wins: test_buckets_are_several_collectives_with_the_same_update runs Gloo with one)."""
    _hvd()
    summary = run_ranks(horovodrun(2, controller, SHORT), tmp_path)
    assert f"backend horovod (compression none, {chosen}" in summary["_stderr"]
    assert summary["config"]["speed"]["allreduce_bucket_mb"] is None
    assert summary["collective_ops_per_step"] == 1  # digits_cnn's 0.6 MiB: one either way
    assert_ranks_identical(summary, tmp_path, 2)


def test_mwms_packs_the_gradients_in_buckets(tmp_path):
    summary, _ = run_workers(SHORT + ["--backend=mwms", BUCKETS], tmp_path)
    # TF cuts the packs (CommunicationOptions.bytes_per_pack); one per bucket of ours.
    assert summary["collective_ops_per_step"] > 1 and summary["steps"] == 12
    assert_ranks_identical(summary, tmp_path, 2)


def test_mwms_accumulation_keeps_collectives_per_step(tmp_path):
    counts = {}
    for k in (1, 4):
        summary, _ = run_workers(SHORT + ["--backend=mwms", f"--grad_accum_steps={k}",
                                          f"--batch_size={16 // k}"], tmp_path / f"k{k}")
        counts[k] = summary["collective_ops_per_step"]
    # The one (packed) gradient all-reduce, whatever k is; the finite verdict is taken on
    # the reduced gradients, so it needs no collective of its own.
    assert counts[1] == counts[4] == 1


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_horovod_compression_halves_bytes_and_converges(tmp_path, compression):
    _hvd()
    args = ["--epochs=3", "--log_every=10"]
    plain = run_ranks(horovodrun(2, "gloo", args + ["--max_steps=2"]), tmp_path / "plain")
    packed = run_ranks(horovodrun(2, "gloo", args + [f"--compression={compression}"]),
                       tmp_path / compression)
    assert packed["wire_bytes_per_step"] * 2 == plain["wire_bytes_per_step"]
    assert packed["test_accuracy"] >= 0.93
    assert_ranks_identical(packed, tmp_path / compression, 2)


def test_mwms_fp16_compression_halves_bytes(tmp_path):
    summary, _ = run_workers(SHORT + ["--backend=mwms", "--compression=fp16"], tmp_path)
    assert summary["wire_bytes_per_step"] == (151306 + 1) * 2  # digits_cnn parameters + the stop vote, x 2 bytes
    assert_ranks_identical(summary, tmp_path, 2)
