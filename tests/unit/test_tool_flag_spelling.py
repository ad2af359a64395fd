"""The report and the data tools spell flags as every other tool does: a dash in a name
means an underscore (launch.argv.normalize_flag_names), and no prefix abbreviations (the
trainer's absl flags take none, nor do `launch` and `plan`)."""
import pytest

from horovod_train import report
from horovod_train.data import __main__ as data_cli
from horovod_train.data import pycorpus


def test_report_takes_dashed_names():
    args = report.parse_args(["--no-plots", "--out", "/tmp/x-y", "runs/np-2"])
    assert args.no_plots and args.out == "/tmp/x-y" and args.run_dirs == ["runs/np-2"]


def test_report_refuses_abbreviations(capsys):
    assert report.main(["--no_plot", "runs/np2"]) == 2
    assert capsys.readouterr().err == (
        "horovod_train.report: error: --no_plot: received an unknown flag; expected a flag "
        "that `horovod_train.report --help` lists. Fix: did you mean --no_plots? Else see "
        "`horovod_train.report --help`\n")


def test_report_main_with_dashes_reaches_our_error(tmp_path, capsys):
    assert report.main(["--no-plots", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("horovod_train.report: error: RUN_DIR") and "metrics.jsonl" in err


def test_data_convert_takes_dashed_names():
    args = data_cli.parse_args(["convert", "--input", "a-b.npz", "--output-dir", "out-dir",
                                "--num-shards=2", "--eval-fraction", "0.2", "--no-progress"])
    assert (args.output_dir, args.num_shards, args.eval_fraction, args.no_progress) == (
        "out-dir", 2, 0.2, True)
    assert args.input == "a-b.npz"


def test_data_verify_takes_dashed_names():
    args = data_cli.parse_args(["verify", "--data-dir", "d", "--skip-corrupt"])
    assert args.data_dir == "d" and args.skip_corrupt


@pytest.mark.parametrize("argv, abbreviated, meant", [
    (["convert", "--input", "x.npz", "--output", "out"], "--output", "--output_dir"),
    (["convert", "--input", "x.npz", "--output_dir", "out", "--num", "2"], "--num",
     "--num_shards"),
    (["verify", "--data", "d"], "--data", "--data_dir"),
])
def test_data_refuses_abbreviations(argv, abbreviated, meant, capsys):
    assert data_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"horovod_train.data: error: {abbreviated}: received an unknown flag")
    assert f"Fix: did you mean {meant}" in err and err.count("\n") == 1


def test_pycorpus_takes_dashed_names(capsys):
    # seq_len 0 is refused by our check before any corpus is read: the flag was parsed.
    assert pycorpus.main(["--seq-len", "0", "--output-dir", "/tmp/unused"]) == 2
    assert capsys.readouterr().err.startswith("pycorpus: error: --seq_len")


def test_pycorpus_refuses_abbreviations(capsys):
    with pytest.raises(SystemExit) as done:
        pycorpus.main(["--seq", "0"])
    assert done.value.code == 2
    assert "unrecognized arguments: --seq" in capsys.readouterr().err
