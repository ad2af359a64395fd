"""Recommendations and the memory-overflow advice."""
from horovod_train.plan.cli import build_parser, request_from_args
import pytest

from horovod_train.plan.recommend import (cost, does_not_fit, evaluate, evaluate_all, gpu_hours,
                                          hours, recommend)


def _req(*flags):
    return request_from_args(build_parser().parse_args(list(flags)))


def test_overflow_names_the_term_the_amount_and_the_levers():
    req = _req("--model", "resnet50", "--global_batch", "4096", "--gpu", "v100-16gb",
               "--precision", "mixed_float16")
    row = evaluate(req, 1)
    assert not row.fits
    note = row.notes[0]
    assert "activations" in note and "GiB over the 16.0 GiB of v100-16gb" in note
    for lever in ("--gradient_checkpointing", "--grad_accum_steps 2", "more GPUs",
                  "--global_batch"):
        assert lever in note


def test_model_too_big_for_data_parallelism():
    req = _req("--model", "gpt:layers=48,hidden=6144,heads=48", "--batch_per_gpu", "1",
               "--gpu", "v100-16gb", "--precision", "mixed_float16")
    note = evaluate(req, 1).notes[0]
    assert "Even one sample per GPU overflows" in note and "sharding" in note


def test_accumulation_steps_for_target_efficiency_over_slow_network():
    req = _req("--model", "resnet50", "--batch_per_gpu", "32", "--gpu", "a100-40gb",
               "--precision", "mixed_bfloat16", "--interconnect", "tcp-10g",
               "--nodes", "1,4", "--target_efficiency", "0.8")
    rows = evaluate_all(req)
    rec = recommend(req, rows)
    assert rows[1].prediction.efficiency < 0.8
    k = rec.accum_for_target[4]
    assert k is not None and k > 1
    assert evaluate(req, 4, accum=k, micro=32).prediction.efficiency >= 0.8
    assert rec.row.nodes == 1          # the only row at or above 80%


def test_fewest_gpus_for_a_target_time():
    req = _req("--model", "resnet50", "--batch_per_gpu", "256", "--gpu", "a100-80gb",
               "--precision", "mixed_bfloat16", "--interconnect", "ib-hdr",
               "--nics_per_node", "8", "--nodes", "1", "--epochs", "90",
               "--target_hours", "1")
    rec = recommend(req, evaluate_all(req))
    assert rec.row is not None and "fewest GPUs" in rec.reason
    assert rec.reason.startswith("--objective fastest")
    assert req.train_samples / rec.row.prediction.throughput / 3600 <= 1
    smaller = evaluate(req, rec.row.nodes // 2)
    assert req.train_samples / smaller.prediction.throughput / 3600 > 1


def test_global_batch_too_small_for_the_cluster():
    req = _req("--model", "resnet50", "--global_batch", "16", "--gpu", "a100-40gb",
               "--interconnect", "ib-hdr", "--nodes", "1,4")
    rows = evaluate_all(req)
    assert rows[0].fits and rows[1].prediction is None
    assert "fewer than one sample" in rows[1].notes[0]


def test_cheapest_respects_the_deadline_and_the_floor():
    flags = ("--model", "resnet50", "--global_batch", "4096", "--gpu", "a100-40gb",
             "--precision", "mixed_bfloat16", "--interconnect", "ib-hdr", "--nodes", "1,2,4,8",
             "--epochs", "90", "--objective", "cheapest")
    free = _req(*flags)
    rows = evaluate_all(free)
    cheapest = recommend(free, rows).row
    fitting = [r for r in rows if r.fits and r.prediction.efficiency >= 0.8]
    per_sample = {r.nodes: r.world / r.prediction.throughput for r in fitting}
    assert cheapest.nodes == min(per_sample, key=per_sample.get)
    # A deadline the cheapest misses moves the pick to the cheapest that meets it.
    deadline = hours(free, cheapest) * 0.6
    timely = _req(*flags, "--target_hours", f"{deadline}")
    rec = recommend(timely, evaluate_all(timely))
    assert rec.row.nodes > cheapest.nodes and hours(timely, rec.row) <= deadline
    assert rec.reason.startswith("--objective cheapest") and "within" in rec.reason
    # No row reaches a floor of 100%: the cheapest that fits, and the reason says so.
    strict = _req(*flags, "--target_efficiency", "1")
    rec = recommend(strict, evaluate_all(strict))
    assert rec.row.nodes == cheapest.nodes and "no configuration reaches 100%" in rec.reason


def test_hours_gpu_hours_and_cost_only_for_what_fits():
    req = _req("--model", "resnet50", "--global_batch", "4096", "--gpu", "a100-40gb",
               "--precision", "tf32", "--interconnect", "ib-hdr", "--nodes", "1,2",
               "--epochs", "90", "--price_per_gpu_hour", "3")
    misfit, fit = evaluate_all(req)
    assert [hours(req, misfit), gpu_hours(req, misfit), cost(req, misfit)] == [None] * 3
    assert does_not_fit(misfit) == "57.7 GiB > 40 GiB" and does_not_fit(fit) is None
    assert cost(req, fit) == pytest.approx(3 * gpu_hours(req, fit))
    assert gpu_hours(req, fit) == pytest.approx(16 * hours(req, fit))


def test_target_hours_on_one_node_without_a_network_searches_no_more_nodes():
    """Found while fixing issue 55 item 7: --target_hours searched up to 1024 nodes even
    where no --interconnect joins them, and the search died with an AttributeError."""
    req = _req("--model", "resnet50", "--batch_size", "64", "--gpu", "a100-80gb",
               "--epochs", "90", "--target_hours", "1")
    rec = recommend(req, evaluate_all(req))
    assert rec.row.nodes == 1 and "--interconnect" in rec.reason
    assert hours(req, rec.row) > 1 and "finishes within 1 h" in rec.reason
