"""--plot: what the PNG draws (plot.series, pure) and that it is written."""
import pytest

from horovod_train.plan.cli import build_parser, main, request_from_args
from horovod_train.plan.plot import series
from horovod_train.plan.recommend import evaluate_all, recommend

FLAGS = ["--model", "resnet50", "--global_batch", "4096", "--gpu", "a100-40gb",
         "--interconnect", "ib-hdr", "--nodes", "1,2,4", "--precision", "tf32"]


def _series(*extra):
    req = request_from_args(build_parser().parse_args(FLAGS + list(extra)))
    rows = evaluate_all(req)
    return series(req, rows, recommend(req, rows))


def test_hours_and_cost_are_labelled_and_misfits_get_no_point():
    d = _series("--epochs", "90", "--price_per_gpu_hour", "2")
    assert d.tick_labels == ["8 GPUs", "16 GPUs", "32 GPUs"]
    assert d.efficiency.x == d.right.x == d.cost.x == [16, 32]     # 8 GPUs do not fit
    assert d.misfits == [(8, "does not fit: 57.7 GiB > 40 GiB")]
    assert d.right_label == "training time (hours)"
    assert all(label.endswith(" h") for label in d.right.labels)
    assert all(label.startswith("$") for label in d.cost.labels)
    assert d.cost.y[0] == pytest.approx(2 * 16 * d.right.y[0])
    assert d.recommended == 32


def test_without_a_length_the_right_panel_is_throughput_and_unpriced():
    d = _series("--price_per_gpu_hour", "2")
    assert d.cost is None and d.right_label == "images/s"


def test_one_gpu_is_singular():
    req = request_from_args(build_parser().parse_args(
        ["--model", "digits_cnn", "--batch_per_gpu", "32", "--gpu", "l4-24gb",
         "--gpus_per_node", "1"]))
    assert series(req, evaluate_all(req)).tick_labels == ["1 GPU"]


def test_plot_writes_a_png_with_cost(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the project venv has it)")
    path = tmp_path / "plan.png"
    assert main(FLAGS + ["--epochs", "90", "--price_per_gpu_hour", "2", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {path}" in capsys.readouterr().out
