"""The planner's command line: tables, JSON, PNG, exit codes and one-line errors."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from horovod_train.plan.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ISSUE_EXAMPLE = ["--model", "resnet50", "--global_batch", "2048", "--gpu", "a100-40gb",
                 "--gpus_per_node", "8", "--interconnect", "ib-hdr", "--nodes", "1,2,4,8,16",
                 "--precision", "mixed_bfloat16"]


def test_issue_example_prints_memory_time_and_recommendation(capsys):
    assert main(ISSUE_EXAMPLE + ["--gradient_checkpointing", "--grad_accum_steps", "2"]) == 0
    out = capsys.readouterr().out
    for text in ("Memory per GPU", "activ", "wkspace", "fits", "Time per optimizer step",
                 "efficiency", "Recommendation:", "gradient checkpointing", "128x2"):
        assert text in out
    assert len([line for line in out.splitlines() if line.strip().startswith("16 ")]) == 2


def test_json_output(capsys):
    assert main(ISSUE_EXAMPLE + ["--json", "--epochs", "90", "--target_hours", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["gpus"] for r in data["rows"]] == [8, 16, 32, 64, 128]
    first = data["rows"][0]
    assert first["fits"] and set(first["memory_gib"]) >= {"parameters", "gradients",
                                                          "optimizer_state", "activations",
                                                          "workspace", "total", "capacity"}
    effs = [r["scaling_efficiency"] for r in data["rows"]]
    assert effs == sorted(effs, reverse=True)     # fixed global batch: efficiency falls
    assert data["recommendation"]["gpus"] >= 8 and data["assumptions"]["matmul_efficiency"] == 0.7


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib, which this interpreter lacks (the project venv has it)")
    path = tmp_path / "eff.png"
    assert main(ISSUE_EXAMPLE + ["--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {path}" in capsys.readouterr().out


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(ISSUE_EXAMPLE + ["--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize("flags, needle", [
    (["--gpu", "a100"], "a100-40gb, a100-80gb"),
    (["--gpu", "a100-40gb", "--interconnect", "myrinet", "--nodes", "1,2"], "ib-hdr"),
    (["--gpu", "a100-40gb", "--nodes", "1,2"], "--interconnect"),
    (["--gpu", "a100-40gb", "--nodes", "0,2"], "--nodes"),
    (["--gpu", "a100-40gb", "--nodes", "two"], "--nodes"),
    (["--gpu", "a100-40gb", "--target_efficiency", "80"], "0.8 for 80%"),
    (["--gpu", "a100-40gb", "--target_hours", "3"], "--epochs"),
    (["--gpu", "a100-40gb", "--grad_accum_steps", "0"], "--grad_accum_steps"),
    (["--gpu", "a100-40gb", "--optimizer", "rmsprop"], "lamb"),
    (["--gpu", "v100-16gb", "--precision", "mixed_bfloat16"], "mixed_float16"),
    (["--gpu", "a100-40gb", "--batch_per_gpu", "8"], "expected one of them, not both"),
])
def test_bad_input_is_one_line_and_exit_2(flags, needle, capsys):
    args = ["--model", "resnet50", "--global_batch", "256"] + flags
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Fix:" in err


def test_bert_epochs_need_a_dataset_size(capsys):
    assert main(["--model", "bert-large", "--batch_per_gpu", "8", "--gpu", "a100-40gb",
                 "--epochs", "1"]) == 2
    assert "--dataset_size" in capsys.readouterr().err


def test_nothing_fits_returns_1(capsys):
    assert main(["--model", "gpt2-xl", "--batch_per_gpu", "16", "--gpu", "v100-16gb",
                 "--precision", "mixed_float16"]) == 1
    assert "does not fit" in capsys.readouterr().out


def test_help_returns_0(capsys):
    assert main(["--help"]) == 0
    assert "--target_efficiency" in capsys.readouterr().out


def test_module_entry_point_runs_without_tensorflow_or_horovod():
    code = ("import sys, runpy; sys.argv = ['plan'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('horovod_train.plan', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'horovod', 'keras', 'matplotlib')]\n"
            "print('HEAVY', bad); sys.exit(rc)\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code, *ISSUE_EXAMPLE], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "Recommendation:" in proc.stdout and "HEAVY []" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "horovod_train.plan", "--model", "x",
                          "--gpu", "a100-40gb", "--global_batch", "8"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and bad.stderr.startswith("horovod_train plan: error: --model")


A100_FP32 = ["--model", "resnet50", "--global_batch", "2048", "--gpu", "a100-40gb",
             "--interconnect", "ib-hdr", "--nodes", "1,2,4", "--epochs", "90"]


def _json(capsys, argv, code=0):
    assert main(argv + ["--json"]) == code
    return json.loads(capsys.readouterr().out)


def test_fp32_on_ampere_is_planned_as_tf32_with_a_warning(capsys):
    # The user trial: fp32 on A100 predicted 10.05 h; TF ran it as TF32 in 3.50 h.
    fp32 = _json(capsys, A100_FP32 + ["--precision", "fp32"])
    tf32 = _json(capsys, A100_FP32 + ["--precision", "tf32"])
    strict = _json(capsys, A100_FP32 + ["--precision", "fp32_strict"])
    hours = [[r["hours"] for r in d["rows"]] for d in (fp32, tf32, strict)]
    assert hours[0] == hours[1] and all(s > 2 * f for s, f in zip(hours[2], hours[0]))
    assert any("TF32" in w for w in fp32["warnings"]) and not tf32["warnings"]
    assert not strict["warnings"]
    assert main(A100_FP32 + ["--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: --precision fp32 on a100-40gb")
    assert "enable_tensor_float_32_execution(False)" in out and "fp32_strict" in out


def test_gpu_hours_and_cost_columns(capsys):
    data = _json(capsys, A100_FP32 + ["--precision", "tf32", "--price_per_gpu_hour", "2.5"])
    for row in data["rows"]:
        assert row["gpu_hours"] == pytest.approx(row["hours"] * row["gpus"])
        assert row["cost_usd"] == pytest.approx(row["gpu_hours"] * 2.5)
    assert data["price_per_gpu_hour"] == 2.5
    assert main(A100_FP32 + ["--price_per_gpu_hour", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours" in out and "cost $" in out
    unpriced = _json(capsys, A100_FP32)
    assert "cost_usd" not in unpriced["rows"][0] and unpriced["rows"][0]["gpu_hours"] > 0
    assert main(A100_FP32) == 0
    assert "cost $" not in capsys.readouterr().out


def test_objective_cheapest_picks_fewest_gpu_hours_and_says_why(capsys):
    argv = A100_FP32 + ["--precision", "tf32", "--price_per_gpu_hour", "2"]
    fastest = _json(capsys, argv)
    cheapest = _json(capsys, argv + ["--objective", "cheapest"])
    rows = {r["nodes"]: r for r in cheapest["rows"]}
    floor = [r for r in rows.values() if r["scaling_efficiency"] >= 0.8]
    want = min(floor, key=lambda r: r["gpu_hours"])
    assert cheapest["recommendation"]["nodes"] == want["nodes"] == 1
    assert fastest["recommendation"]["nodes"] == 4
    assert cheapest["objective"] == "cheapest" and fastest["objective"] == "fastest"
    assert main(argv + ["--objective", "cheapest"]) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("Recommendation")][0]
    assert "--objective cheapest" in line and "fewest GPU-hours" in line and "$" in line


def test_configurations_that_do_not_fit_have_no_hours_nor_cost(capsys):
    argv = ["--model", "resnet50", "--global_batch", "4096", "--gpu", "a100-40gb",
            "--interconnect", "ib-hdr", "--nodes", "1,2", "--precision", "tf32", "--epochs", "90",
            "--price_per_gpu_hour", "2"]
    data = _json(capsys, argv)
    big, small = data["rows"]
    assert not big["fits"] and small["fits"]
    for key in ("hours", "gpu_hours", "cost_usd", "step_s", "samples_per_sec"):
        assert big.get(key) is None and small[key] > 0
    assert big["does_not_fit"] == (f"{big['memory_gib']['total']:.1f} GiB > "
                                   f"{big['memory_gib']['capacity']:.0f} GiB")
    assert main(argv) == 0
    line = [l for l in capsys.readouterr().out.splitlines()
            if l.split()[:2] == ["1", "8"] and "does not fit" in l]
    assert len(line) == 1 and "GiB > 40 GiB" in line[0]


def test_the_trainers_flag_names_with_dashes_or_underscores(capsys):
    base = ["--model", "decoder_lm_124m", "--batch_per_gpu", "8", "--gpu", "a100-80gb",
            "--precision", "mixed_bfloat16"]
    one = _json(capsys, base + ["--fusion_threshold_mb", "64", "--cycle_time_ms", "5"])
    two = _json(capsys, base + ["--fusion-threshold-mb=64", "--cycle-time-ms", "5",
                                "--batch-per-gpu", "8"])
    assert one["fusion_threshold_mb"] == two["fusion_threshold_mb"] == 64
    assert one["cycle_time_ms"] == two["cycle_time_ms"] == 5
    default = _json(capsys, base + ["--fusion_threshold_mb", "0"])   # 0: Horovod's default
    assert default["fusion_threshold_mb"] == 128 and default["cycle_time_ms"] == 1
    for old, new in (("--fusion_mb", "--fusion_threshold_mb"), ("--cycle-ms", "--cycle_time_ms")):
        assert main(base + [old, "5"]) == 2
        err = capsys.readouterr().err
        assert old.replace("-", "_")[2:] in err and f"pass {new} instead" in err
    assert main(base + ["--fusion_threshold", "5"]) == 2       # no abbreviations, as absl
    assert ("--fusion_threshold: received an unknown flag; expected a flag that `horovod_train "
            "plan --help` lists. Fix: did you mean --fusion_threshold_mb?"
            ) in capsys.readouterr().err


def test_no_message_says_received_none(capsys):
    assert main(["--model", "resnet50", "--global_batch", "256", "--gpu", "a100-40gb",
                 "--nodes", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "--interconnect" in err and "None" not in err


def test_price_must_be_positive(capsys):
    assert main(A100_FP32 + ["--price_per_gpu_hour", "-1"]) == 2
    assert "--price_per_gpu_hour" in capsys.readouterr().err


def test_recommendation_counts_are_singular_or_plural(capsys):
    assert main(["--model", "digits_cnn", "--batch_per_gpu", "32", "--gpu", "l4-24gb",
                 "--gpus_per_node", "1"]) == 0
    out = capsys.readouterr().out
    assert "Recommendation: 1 node = 1 GPU, batch/GPU 32 x 1 accumulation step," in out
    assert "GPU(s)" not in out and "node(s)" not in out


def test_compression_takes_the_trainers_choices(capsys):
    base = ["--model", "resnet50", "--batch_per_gpu", "64", "--gpu", "a100-40gb",
            "--interconnect", "tcp-10g", "--nodes", "2"]
    comm = {c: _json(capsys, base + ["--compression", c])["rows"][0]["comm_busy_s"]
            for c in ("none", "fp16", "bf16")}
    assert comm["fp16"] == comm["bf16"] == pytest.approx(comm["none"] / 2, rel=0.1)
    assert main(base + ["--compression", "bf16"]) == 0
    assert "gradients bf16" in capsys.readouterr().out
    assert main(base + ["--compression", "int8"]) == 2
    assert "none, fp16, bf16" in capsys.readouterr().err
    from horovod_train.plan.cost import WIRE_BYTES
    from launch import contract
    assert tuple(WIRE_BYTES) == contract.COMPRESSIONS        # the trainer's list, all of it


# The trainer's per-replica --batch_size is the planner's micro-batch per GPU: one name.
WEAK = ["--model", "resnet50", "--gpu", "a100-40gb", "--interconnect", "ib-hdr",
        "--nodes", "1,2", "--json"]


def test_batch_size_is_the_trainers_name_for_the_micro_batch(capsys):
    assert main(WEAK + ["--batch_size", "64"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["batch_per_gpu"] for row in rows] == [64, 64]


@pytest.mark.parametrize("spelling", [["--batch_per_gpu", "64"], ["--batch-per-gpu=64"],
                                      ["--batch-size", "64"]])
def test_the_old_name_and_dashes_stay_accepted(spelling, capsys):
    assert main(WEAK + ["--batch_size", "64"]) == 0
    expected = capsys.readouterr().out
    assert main(WEAK + spelling) == 0
    assert capsys.readouterr().out == expected


def test_batch_size_and_its_old_name_together_are_refused(capsys):
    assert main(WEAK + ["--batch_size", "64", "--batch_per_gpu", "32"]) == 2
    err = capsys.readouterr().err
    assert "--batch_per_gpu: received --batch_per_gpu with --batch_size; expected one of " \
        "them" in err


def test_bad_batch_size_names_the_trainers_flag(capsys):
    assert main(WEAK + ["--batch_per_gpu", "0"]) == 2
    assert capsys.readouterr().err.startswith("horovod_train plan: error: --batch_size: received 0")


def test_help_and_levers_speak_batch_size(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--batch_size" in out and "--batch_per_gpu" not in out
    assert main(["--model", "resnet50", "--batch_size", "1024", "--gpu", "v100-16gb"]) == 0
    out = capsys.readouterr().out
    assert "--batch_size " in out and "--batch_per_gpu" not in out
    # Fits only with accumulation: the recommendation names the trainer's flags for it.
    assert "with --batch_size 128 --grad_accum_steps 8 it does" in out


# The trainer's --allreduce_bucket_mb picks the planner's allreduce model: buckets (> 0,
# the trainer's default 4) overlap backprop, 0 is one grouped call after it. Not given,
# the planner plans the trainer's default.
OVERLAP_CASE = ["--model", "resnet50", "--batch_size", "64", "--gpu", "a100-40gb",
                "--interconnect", "ib-hdr", "--nodes", "1,4", "--json"]


def _plan_json(flags, capsys):
    assert main(OVERLAP_CASE + flags) == 0
    return json.loads(capsys.readouterr().out)


def _trainer_bucket_default() -> float:
    """The trainer's --allreduce_bucket_mb default on the GPU hosts the planner plans:
    the config leaves it unset and the backend's rule (backends/horovod.unset_bucket_mb,
    tested in tests/tf/test_cpu_sharing.py) takes buckets.mib_to_bytes(None)'s size."""
    from horovod_train.backends import buckets
    from horovod_train.config import SpeedConfig
    assert next(f.default for f in dataclasses.fields(SpeedConfig)
                if f.name == "allreduce_bucket_mb") is None
    return buckets.mib_to_bytes(None) / 2 ** 20


@pytest.mark.parametrize("flags, overlap", [
    (["--allreduce_bucket_mb", "4"], True), (["--allreduce-bucket-mb=0.5"], True),
    (["--allreduce_bucket_mb", "0"], False), ([], True), (["--overlap"], True)])
def test_allreduce_bucket_mb_selects_the_overlap_model(flags, overlap, capsys):
    plan = _plan_json(flags, capsys)
    assert plan["overlap"] is overlap
    same = _plan_json(["--allreduce_bucket_mb", "1" if overlap else "0"], capsys)
    assert plan["rows"] == same["rows"]


def test_the_default_is_the_trainers(capsys):
    from horovod_train.config import DEFAULT_BUCKET_MB
    default = _trainer_bucket_default()
    assert default == DEFAULT_BUCKET_MB > 0
    assert build_parser().parse_args(OVERLAP_CASE).allreduce_bucket_mb == default
    # Not given = the trainer's default, row for row; 0 = a different (slower) plan.
    given = _plan_json(["--allreduce_bucket_mb", f"{default:g}"], capsys)
    assert _plan_json([], capsys) == given and given["overlap"] is True
    after = _plan_json(["--allreduce_bucket_mb", "0"], capsys)
    four = given["rows"][-1]
    assert after["rows"][-1]["comm_exposed_s"] > four["comm_exposed_s"], (after, four)


def test_buckets_of_zero_and_overlap_contradict(capsys):
    assert main(OVERLAP_CASE + ["--allreduce_bucket_mb", "0", "--overlap"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("horovod_train plan: error: --allreduce_bucket_mb: received '0 with --overlap'; "
                          "expected one of them")
    assert "Fix: drop --overlap" in err and "\n" not in err.strip()


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_bad_bucket_sizes_are_refused(value, capsys):
    assert main(OVERLAP_CASE + ["--allreduce_bucket_mb", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("horovod_train plan: error: --allreduce_bucket_mb: received")
    assert "Fix: pass --allreduce_bucket_mb 4 (the trainer's default), or 0" in err


def test_help_says_the_default_is_the_trainers_overlap(capsys):
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "as horovod_train does" not in out and "the most exposed comm" in out
    assert "the trainer's flag and its default on GPU hosts (4): > 0 plans the allreduce overlapping" in out


def test_the_plan_says_which_length_it_used_and_whether_the_trainer_trains_it(capsys):
    """Issue 45: --train_samples wins over --epochs, and the plan says so; a model the
    trainer's zoo lacks (GPT-2 medium) is planned, and the plan says the trainer cannot."""
    base = ["--gpu", "a100-80gb", "--global_batch", "64"]
    assert main(["--model", "gpt2-medium", *base, "--epochs", "3", "--train_samples",
                 "1e9"]) == 0
    out = capsys.readouterr().out
    assert ("length: --train_samples 1,000,000,000 samples; --epochs 3 ignored: pass one of "
            "them; trainer: cannot train gpt2-medium, which is not in its zoo") in out
    assert main(["--model", "gpt2-small", *base, "--epochs", "2", "--dataset_size", "1000",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["length"] == ("length: --epochs 2 x 1,000 samples (--dataset_size) = "
                              "2,000 samples")
    assert plan["trainer"] == "trainer: horovod_train train --model decoder_lm_124m trains it"
    assert plan["train_samples"] == 2000
