"""bench/run_all.py runs every figure script: a script that writes a figure's JSON
(through bench.common's main or run_figure) and is wired to nothing is a figure nobody
reruns."""
from pathlib import Path

import pytest

from bench import run_all

BENCH = Path(__file__).resolve().parents[2] / "bench"


def figure_scripts() -> set:
    return {path.name for path in BENCH.glob("*.py") if path.name != "run_all.py"
            and ("common.main(" in path.read_text() or "common.run_figure(" in path.read_text())}


def wired_scripts() -> set:
    here = {f"{measure.__module__.rsplit('.', 1)[-1]}.py" for measure, _ in run_all.FIGURES.values()}
    return here | {script for script, _, _ in run_all.CHILD_FIGURES.values()}


def test_every_figure_script_is_in_run_all():
    missing = figure_scripts() - wired_scripts() - set(run_all.DIAGNOSTICS)
    assert not missing, f"figure scripts bench/run_all.py does not run: {sorted(missing)}"


def test_the_scan_finds_the_figures():
    assert {"overhead.py", "comm.py", "input_pipeline.py", "scaling.py"} <= figure_scripts()
    assert set(run_all.DIAGNOSTICS) <= figure_scripts()  # a removed one leaves the list


def test_an_unknown_figure_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        run_all.main(["--only", "m1"])
    assert done.value.code == 2 and "expected names from" in capsys.readouterr().err
