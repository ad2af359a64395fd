"""horovod_train.console: which of TensorFlow's start-up lines are dropped, the filter
(as a stream and as a window over fd 2, a crash inside it included), our line format,
the config's changed options and the figures' digits. No TF."""
import logging
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT, child_env
from horovod_train import config as cfg
from horovod_train import console

# Copied from a 2-rank horovodrun run of TF 2.21 on this CPU-only machine (issue 22).
TF_IMPORT = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796148557.931275    8438 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors from "
    "different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1796148558.017695    8438 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 AVX512_FP16 "
    "AVX_VNNI AMX_TILE AMX_INT8 AMX_BF16 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
]
NO_DRIVER = [
    "I0000 00:00:1796148557.931932    8438 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "E0000 00:00:1796148565.409854    8583 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
]
OURS = [
    "gpu   | no GPU visible: training on CPU",
    "train | step 20/220 | loss 1.1996 | 381 samples/s (191/rank) | data 0% step 99% | eta 34s",
    "E0000 00:00:1796148565.409854    8583 cuda_executor.cc:9] a real failure",
    "F0000 00:00:1796148565.409854    8583 port.cc:1] Check failed: x",  # same file, other text
    "",
]


def _noise(line: str, driver_loaded: bool) -> bool:
    return console.noise_patterns(driver_loaded).fullmatch(line) is not None


def test_tf_start_up_lines_are_noise_and_ours_are_not():
    assert all(_noise(line, driver_loaded=False) for line in TF_IMPORT + NO_DRIVER)
    assert not any(_noise(line, driver_loaded=False) for line in OURS)
    # A launcher's tag makes a line the rank's: only the launcher's own lines are matched.
    assert not _noise("[1,0]<stderr>:" + TF_IMPORT[0], driver_loaded=False)


def test_no_cuda_lines_show_where_the_nvidia_driver_is_loaded():
    assert all(_noise(line, driver_loaded=True) for line in TF_IMPORT)
    assert not any(_noise(line, driver_loaded=True) for line in NO_DRIVER)


def _filter(data: bytes, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "horovod_train.console"], input=data,
                          capture_output=True, env=child_env(**env), cwd=ROOT, timeout=60)


def test_the_stream_filter_keeps_every_other_line_and_a_last_one_without_newline():
    text = "\n".join(TF_IMPORT + NO_DRIVER[:1] + ["kept 1", "", "kept 2"]) + "\nno newline"
    proc = _filter(text.encode())
    assert proc.returncode == 0 and proc.stdout == b""
    assert proc.stderr == b"kept 1\n\nkept 2\nno newline"


def test_the_stream_filter_passes_everything_when_verbose():
    text = "\n".join(TF_IMPORT) + "\n"
    assert _filter(text.encode(), HOROVOD_TRAIN_VERBOSE="1").stderr == text.encode()


_WINDOW = """
import os, sys
from horovod_train import console
print("before", file=sys.stderr)
with console.startup_filter():
    os.write(2, ({noise!r} + "\\n").encode())
    os.write(2, b"native line\\n")
    print("python line", file=sys.stderr)
    {ending}
print("after", file=sys.stderr)
"""


def _window(ending: str, **env) -> subprocess.CompletedProcess:
    code = textwrap.dedent(_WINDOW).format(noise=TF_IMPORT[1], ending=ending)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(**env), cwd=ROOT, timeout=60)


def test_the_window_drops_noise_written_to_fd_2_and_keeps_order():
    proc = _window("pass")
    assert proc.returncode == 0
    assert proc.stderr == "before\nnative line\npython line\nafter\n"


@pytest.mark.parametrize("ending, code", [("raise RuntimeError('boom')", 1),
                                          ("os.abort()", -6), ("os._exit(7)", 7)])
def test_what_the_window_caught_shows_when_the_body_dies(ending, code):
    proc = _window(ending)
    assert proc.returncode == code
    assert "native line\npython line\n" in proc.stderr and "oneDNN" not in proc.stderr
    if code == 1:
        assert proc.stderr.rstrip().endswith("RuntimeError: boom")


def test_the_window_shows_everything_when_verbose():
    proc = _window("pass", HOROVOD_TRAIN_VERBOSE="1")
    assert proc.stderr == f"before\n{TF_IMPORT[1]}\nnative line\npython line\nafter\n"


def test_verbose_values():
    assert not console.verbose({}) and not console.verbose({"HOROVOD_TRAIN_VERBOSE": "0"})
    assert not console.verbose({"HOROVOD_TRAIN_VERBOSE": "false"})
    assert console.verbose({"HOROVOD_TRAIN_VERBOSE": "1"})
    assert console.verbose({"HOROVOD_TRAIN_VERBOSE": "yes"})


def _record(level, message, name="absl"):
    return logging.LogRecord(name, level, __file__, 1, message, (), None)


def test_lines_carry_no_absl_prefix_and_a_short_level_above_info():
    fmt = console.LineFormatter("%(message)s")
    assert fmt.format(_record(logging.INFO, "train | step 1/2")) == "train | step 1/2"
    assert fmt.format(_record(logging.WARNING, "checkpoint | x")) == "warning: checkpoint | x"
    assert fmt.format(_record(logging.ERROR, "watchdog | y")) == "error: watchdog | y"
    assert fmt.format(_record(logging.CRITICAL, "z")) == "error: z"
    assert fmt.format(_record(logging.WARNING, "w", "tensorflow")) == "warning: tensorflow: w"


def test_changed_options_are_the_non_default_flags():
    assert console.changed_options(cfg.RunConfig()) == "defaults"
    config = cfg.RunConfig(train=cfg.TrainConfig(epochs=3), summary_json="my runs/summary.json",
                           observe=cfg.ObserveConfig(instrument=False),
                           optim=cfg.OptimConfig(learning_rate=0.0005),
                           data=cfg.DataConfig(synthetic_shape=(4, 4, 3)))
    assert console.changed_options(config) == (
        "synthetic_shape=4,4,3 learning_rate=0.0005 epochs=3 instrument=false "
        "summary_json='my runs/summary.json'")


def test_figures_have_a_few_digits():
    assert console.number(0.0009377987735206261) == "0.0009378"
    assert console.number(1.19962) == "1.2" and console.number(None) == "-"
    assert console.number(220) == "220"
    assert console.per_second(4273.49) == "4273" and console.per_second(None) == "-"
