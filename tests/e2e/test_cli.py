"""The command line: bad input exits 2 with one line, imports stay light, flagfiles work."""
import os
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import module_hook

TRAIN = [sys.executable, "-m", "horovod_train"]


@pytest.mark.parametrize("args, fragment", [
    (["--model=resnet9000"], "digits_cnn"),
    (["--dataset=imagenet21k"], "digits"),
    (["--backend=nccl"], "horovod"),
    (["--batch_size=0"], "--batch_size"),
    (["--epochs=-1"], "--epochs"),
    (["--max_steps=-5"], "--max_steps"),
    (["--data_dir=/no/such/dir", "--max_steps=1"], "/no/such/dir"),
    (["--batch_size=seven"], "--batch_size"),
    (["--no_such_flag=1"], "no_such_flag"),
    (["--jit_compile=yes"], "--jit_compile: received 'yes'; expected one of: auto, false, true"),
    (["--jit_compile=true", "--deterministic"], "drop --deterministic"),
    # nan/inf/out-of-range numbers (issue 17, items 4 and 14): accepted, or a traceback, before.
    (["--collective_timeout_s=nan"], "--collective_timeout_s: received nan"),
    (["--collective_timeout_s=inf"], "--collective_timeout_s: received inf"),
    (["--collective_timeout_s=0"], "--collective_timeout_s: received 0.0"),
    (["--seed=-1"], "--seed: received -1"),
    (["--seed=4294967296"], "--seed: received 4294967296"),
    (["--warmup_epochs=nan"], "--warmup_epochs: received nan"),
    (["--warmup_epochs=inf"], "--warmup_epochs: received inf"),
    (["--optimizer=sgd", "--momentum=2"], "expected a finite number with 0 <= momentum < 1"),
    (["--learning_rate=nan"], "--learning_rate: received nan"),
    (["--learning_rate=inf"], "--learning_rate: received inf"),
    (["--fusion_threshold_mb=nan"], "--fusion_threshold_mb: received nan"),
    (["--cycle_time_ms=-1"], "--cycle_time_ms: received -1.0"),
    (["--baseline_samples_per_sec=inf"], "--baseline_samples_per_sec: received inf"),
    # The speed levers.
    (["--grad_accum_steps=0"], "--grad_accum_steps"),
    (["--precision=fp8"], "mixed_bfloat16"),
    (["--compression=int4"], "bf16"),
    # A model that cannot take the dataset's examples (issue 22: exit 1 and Keras's traceback).
    (["--dataset=synthetic", "--synthetic_shape=64", "--model=digits_cnn", "--max_steps=1"],
     "--model: received 'digits_cnn'"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    proc = run_cli(TRAIN + args, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("horovod_train: error")]
    assert len(lines) == 1 and fragment in lines[0] and "Fix" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_horovod_backend_without_horovod_says_how_to_fix(tmp_path):
    # A stand-in package that fails to import, first on the path, as on a machine
    # where Horovod was never built.
    fake = tmp_path / "horovod"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named horovod (stand-in)')\n")
    env = child_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    proc = run_cli(TRAIN + ["--backend=horovod", "--max_steps=1"], env=env, timeout=300)
    assert proc.returncode == 2
    assert "Horovod is not importable" in proc.stderr and "make setup" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_light_imports_load_no_tensorflow():
    code = ("import sys, horovod_train, horovod_train.config, horovod_train.flags, "
            "horovod_train.env, horovod_train.backends, models; "
            "import horovod_train.data.sharding; "
            "assert 'tensorflow' not in sys.modules and 'horovod' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith(('tensorflow', 'horovod.')))")
    proc = run_cli([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_flagfile_and_single_process_run(tmp_path):
    flagfile = tmp_path / "flags.txt"
    flagfile.write_text("--backend=local\n--max_steps=12\n--log_every=4\n--model=digits_mlp\n")
    out, loaded = tmp_path / "summary.json", tmp_path / "modules.json"
    # Which modules the run had loaded by its end (lean_keras.py: not Keras' optional extras).
    hook = module_hook(tmp_path, "horovod_train.loop", f"""
        original = module.run
        def run(config):
            try:
                return original(config)
            finally:
                import json, sys
                with open({str(loaded)!r}, "w") as f:
                    json.dump(sorted(sys.modules), f)
        module.run = run
    """)
    proc = run_cli(TRAIN + [f"--flagfile={flagfile}", f"--summary_json={out}"], timeout=300,
                   env=child_env(PYTHONPATH=hook))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    summary = json.loads(out.read_text())
    assert summary["steps"] == 12 and summary["config"]["model"] == "digits_mlp"
    assert "train | step 12/12 | loss" in proc.stderr
    modules = json.loads(loaded.read_text())
    assert "keras" in modules and "horovod_train.data.sources" in modules, modules[:50]
    # Nor NVML's module where TensorFlow sees no GPU (observe/nvml.py).
    assert not [name for name in modules
                if name.split(".")[0] in ("sklearn", "matplotlib", "pynvml")]


def test_persistently_nonfinite_run_stops_with_a_message(tmp_path):
    # A learning rate that blows the weights up: every step's gradients are non-finite.
    proc = run_cli(TRAIN + ["--backend=local", "--learning_rate=1e38", "--optimizer=sgd",
                            "--max_nonfinite_steps=3", "--max_steps=50", "--eval_every_epochs=0"],
                   timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "--max_nonfinite_steps" in proc.stderr and "Traceback" not in proc.stderr


def test_helpfull_lists_every_flag_with_its_help():
    """The flags are generated from the config fields: each field shows up in --helpfull
    under its own name with the help text written on the field."""
    from horovod_train.flags import option_fields
    proc = run_cli(TRAIN + ["--helpfull"], timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "\nfaults: " in proc.stdout and "--verbosity" in proc.stdout  # ours, then absl's
    squeezed = "".join(proc.stdout.split())  # the help is wrapped and indented
    for _, field in option_fields():
        name = f"--[no]{field.name}" if isinstance(field.default, bool) else f"--{field.name}"
        assert name + "(default:" in squeezed, name
        assert "".join(field.metadata["help"].split()) in squeezed, field.name
