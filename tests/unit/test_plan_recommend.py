"""Recommendations and the memory-overflow advice."""
from horovod_train.plan.cli import build_parser, request_from_args
from horovod_train.plan.recommend import evaluate, evaluate_all, recommend


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
    hours = req.train_samples / rec.row.prediction.throughput / 3600
    assert hours <= 1
    smaller = evaluate(req, rec.row.nodes // 2)
    assert req.train_samples / smaller.prediction.throughput / 3600 > 1


def test_global_batch_too_small_for_the_cluster():
    req = _req("--model", "resnet50", "--global_batch", "16", "--gpu", "a100-40gb",
               "--interconnect", "ib-hdr", "--nodes", "1,4")
    rows = evaluate_all(req)
    assert rows[0].fits and rows[1].prediction is None
    assert "fewer than one sample" in rows[1].notes[0]
