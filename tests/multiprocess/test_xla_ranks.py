"""--jit_compile=true on real ranks (CPU): XLA compiles each rank's gradients and update,
the collectives run between them. Under horovodrun --gloo and --mpi and as two MWMS
workers: the default job's accuracy, identical weights, and a poisoned fp16 step that
every rank skips together. Each summary also reports what the step's graph holds: were
a collective inside an XLA function, XLA on CPU would refuse to run it."""
import pytest

from ranks import assert_ranks_identical, horovodrun, only_chief_files, run_ranks
from test_mwms_workers import run_workers
from test_speed_levers import INJECT, SHORT, _check_injected_skip

pytestmark = pytest.mark.slow
XLA = ["--jit_compile=true"]


def _horovod(controller):
    def run(args, run_dir):
        pytest.importorskip("horovod.tensorflow")
        return run_ranks(horovodrun(2, controller, args), run_dir)
    return run


LAUNCHERS = {
    "horovodrun-gloo": _horovod("gloo"),
    "horovodrun-mpi": _horovod("mpi"),
    "mwms-workers": lambda args, run_dir: run_workers(args, run_dir)[0],
}


def _check_compiled_around_collectives(summary):
    assert summary["jit_compile"] is True
    assert summary["collective_ops_per_step"] >= 1 and summary["collective_ops_in_xla"] == 0
    assert summary["xla_compiled_functions"] >= 2  # the gradients and the update, at least


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_default_job_with_xla_reaches_095_on_identical_ranks(tmp_path, launcher):
    summary = LAUNCHERS[launcher](XLA, tmp_path)
    assert summary["world_size"] == 2
    assert summary["backend"] == ("mwms" if launcher == "mwms-workers" else "horovod")
    _check_compiled_around_collectives(summary)
    assert summary["test_accuracy"] >= 0.95
    assert_ranks_identical(summary, tmp_path, 2)
    only_chief_files(tmp_path)


@pytest.mark.parametrize("launcher", ["horovodrun-gloo", "mwms-workers"])
def test_fp16_poisoned_step_is_skipped_by_every_rank_under_xla(tmp_path, launcher):
    summary = LAUNCHERS[launcher](SHORT + INJECT + XLA, tmp_path)
    _check_compiled_around_collectives(summary)
    _check_injected_skip(summary, tmp_path)
