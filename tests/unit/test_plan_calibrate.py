"""--calibrate: a tolerant summary.json reader that replaces assumed numbers."""
import json

import pytest

from horovod_train.plan.calibrate import calibrate
from horovod_train.plan.cli import build_parser, main, request_from_args
from horovod_train.plan.errors import PlanError
from horovod_train.plan.recommend import evaluate

FLAGS = ["--model", "resnet50", "--batch_per_gpu", "64", "--gpu", "a100-40gb",
         "--precision", "mixed_float16", "--gpus_per_node", "2"]


def _req(*extra):
    return request_from_args(build_parser().parse_args(FLAGS + list(extra)))


def _write(tmp_path, data):
    (tmp_path / "summary.json").write_text(json.dumps(data))
    return str(tmp_path)


def test_breakdown_calibrates_compute_bandwidth_and_input_wait(tmp_path):
    run = _write(tmp_path, {"samples_per_sec": 3000.0, "world_size": 2, "batch_per_gpu": 64,
                            "breakdown": {"compute_s": 0.035, "comm_s": 0.006, "data_s": 0.002}})
    # The run's comm is all of the allreduce (one grouped call after backprop, the
    # trainer's --allreduce_bucket_mb=0), and so is the plan's.
    req = _req("--allreduce_bucket_mb", "0")
    calib = calibrate(run, req)
    assert calib.intra_busbw is not None and calib.node_net_bw is None
    assert calib.data_s_per_sample > 0 and calib.compute_scale > 0
    assert not any("exposed part" in n for n in calib.notes)
    # The calibrated planner reproduces the run it was calibrated on.
    predicted = evaluate(req, 1, calib=calib).prediction.throughput
    assert predicted == pytest.approx(3000.0, rel=0.05)


def test_an_overlapping_plan_says_its_calibrated_comm_is_not_the_runs(tmp_path):
    # The planner's default is the trainer's (buckets overlapping backprop): the run's
    # measured comm is then only the exposed part, and the note says how to reproduce it.
    run = _write(tmp_path, {"samples_per_sec": 3000.0, "world_size": 2, "batch_per_gpu": 64,
                            "breakdown": {"compute_s": 0.035, "comm_s": 0.006, "data_s": 0.002}})
    req = _req()
    assert req.overlap
    note = next(n for n in calibrate(run, req).notes if "exposed part" in n)
    assert "--allreduce_bucket_mb 0" in note and "--allreduce_bucket_mb=0" in note


def test_fractions_nested_under_train_and_aliases(tmp_path):
    run = _write(tmp_path, {"train": {"throughput": 3000.0, "size": 2,
                                      "step_breakdown": {"compute": 0.81, "comm_frac": 0.14,
                                                         "data_pct": 0.05}}})
    calib = calibrate(run, _req())
    assert calib.intra_busbw is not None
    assert any("3000.0 samples/s" in n for n in calib.notes)


def test_multi_node_run_calibrates_the_network(tmp_path):
    run = _write(tmp_path, {"samples_per_sec": 2000.0, "world_size": 4, "nodes": 2,
                            "breakdown": {"compute_s": 0.06, "comm_s": 0.05, "data_s": 0.0}})
    calib = calibrate(run, _req("--interconnect", "tcp-10g", "--nodes", "1,2"))
    assert calib.node_net_bw is not None and calib.intra_busbw is None


def test_no_breakdown_single_gpu_scales_compute(tmp_path):
    req = _req()
    one = evaluate(request_from_args(build_parser().parse_args(
        FLAGS[:-1] + ["1"])), 1).prediction.throughput
    run = _write(tmp_path, {"samples_per_sec": one / 2, "model": "resnet50"})
    calib = calibrate(run, req)
    assert calib.compute_scale == pytest.approx(2.0, rel=0.02)


def test_a_run_of_another_model_is_refused(tmp_path, capsys):
    run = _write(tmp_path, {"samples_per_sec": 100.0, "model": "resnet101"})
    with pytest.raises(PlanError) as err:
        calibrate(run, _req())
    message = str(err.value)
    assert "resnet101" in message and "resnet50" in message and "Fix:" in message
    assert "\n" not in message
    assert main(FLAGS + ["--calibrate", run]) == 2
    assert "resnet101" in capsys.readouterr().err


def test_a_run_under_the_trainers_name_of_the_planned_model_calibrates(tmp_path):
    run = _write(tmp_path, {"samples_per_sec": 100.0, "model": "decoder_lm_124m"})
    req = request_from_args(build_parser().parse_args(
        ["--model", "gpt2-small", "--batch_per_gpu", "8", "--gpu", "a100-40gb"]))
    assert calibrate(run, req).compute_scale > 0


def test_no_breakdown_multi_gpu_matches_step(tmp_path):
    run = _write(tmp_path, {"samples_per_sec": 1500.0, "world_size": 2})
    req = _req()
    calib = calibrate(run, req)
    assert evaluate(req, 1, calib=calib).prediction.throughput == pytest.approx(1500, rel=0.05)


@pytest.mark.parametrize("content, match", [
    (None, "summary.json"),
    ("{not json", "readable JSON"),
    ("[1, 2]", "JSON object"),
    ('{"world_size": 2}', "samples_per_sec"),
    ('{"samples_per_sec": -3}', "non-negative"),
])
def test_bad_summaries(tmp_path, content, match):
    if content is not None:
        (tmp_path / "summary.json").write_text(content)
    with pytest.raises(PlanError, match=match):
        calibrate(str(tmp_path), _req())


def test_accepts_the_file_itself(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"samples_per_sec": 100.0}))
    assert calibrate(str(path), _req()).source == str(path)


def test_an_fp32_run_calibrates_a_tf32_plan_without_a_mismatch_note(tmp_path):
    # On an A100 the trainer's fp32 is TF32 math: the same precision as the plan's tf32.
    run = _write(tmp_path, {"samples_per_sec": 100.0, "precision": "fp32"})
    tf32 = calibrate(run, _req("--precision", "tf32"))
    assert not any("precision" in n for n in tf32.notes)
    strict = calibrate(run, _req("--precision", "fp32_strict"))
    assert any("the run's precision is 'fp32'" in n for n in strict.notes)
