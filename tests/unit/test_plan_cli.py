"""The planner's command line: tables, JSON, PNG, exit codes and one-line errors."""
import json
import os
import subprocess
import sys

import pytest

from horovod_train.plan.cli import main

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
    (["--gpu", "a100-40gb", "--batch_per_gpu", "8"], "not allowed with"),
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
    assert bad.returncode == 2 and bad.stderr.startswith("error: --model")
