"""Real ranks for horovod_train.keras: examples/keras_fit.py (a user's own model.fit
script with the swap) under horovodrun --gloo and --mpi and as two MWMS workers, and the
Horovod Keras failure that the swap replaces.

Every rank runs in its own directory (rank0/, rank1/) and the checkpoint path is
relative, so a file written by a non-chief rank would show up in rank1/.
"""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import free_ports, tf_config
from scenarios import KERAS_FIT_CASES, keras_fit_args


EXAMPLE = os.path.join(ROOT, "examples", "keras_fit.py")


def run_mwms_workers(run_dir, args, n=2):
    ports = free_ports(n)
    procs = []
    for i in range(n):
        cwd = run_dir / f"rank{i}"
        cwd.mkdir(parents=True)
        procs.append(subprocess.Popen([sys.executable, EXAMPLE, *args], cwd=cwd,
                                      env=child_env(TF_CONFIG=tf_config(ports, i)),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=420) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"{out[-3000:]}\n{err[-5000:]}"
    return outs[0][0]


@pytest.mark.parametrize("case", list(KERAS_FIT_CASES))
def test_example_trains_identical_replicas(tmp_path, case, gloo_session, mpi_session):
    """Identical weights on every rank, >= 0.95 test accuracy; with mixed_float16 and
    one rank's gradients poisoned once, every rank skips that step (one skip, scale
    halved) and carries on identical; the checkpoint is the chief's alone. The horovodrun
    cases are the `keras_fit` jobs of the Gloo and MPI rank sessions (conftest.py); the
    MWMS workers start here (a session's MWMS strategy is its first job's)."""
    launcher, extra, inject, checkpoint = KERAS_FIT_CASES[case]
    if launcher == "mwms":
        stdout = run_mwms_workers(tmp_path, keras_fit_args(case, str(tmp_path)))
        base = tmp_path
    else:
        session = {"gloo": gloo_session, "mpi": mpi_session}[launcher]
        base, stdout = session.job_dir("keras_fit"), session.job_stdout("keras_fit")
        assert session.job_argv("keras_fit") == keras_fit_args(case, str(base))
    summary = json.loads((base / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["backend"] == ("mwms" if launcher == "mwms" else "horovod")
    # Still on after fit (the drop-in used to turn it off); auto is off on CPU.
    assert summary["jit_compile"] is ("--jit_compile=true" in extra)
    digests = summary["weight_digests"]
    assert len(digests) == 2 and len(set(digests)) == 1, f"ranks diverged: {digests}"
    assert summary["test_accuracy"] >= 0.95, summary["history"]
    assert summary["predict_accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-6)
    if inject:
        assert summary["skipped_steps"] == [1.0, 1.0]
        assert summary["loss_scale"] == [2.0 ** 14] * 2  # 2**15 halved once, on both
    else:
        assert summary["skipped_steps"] == [0.0, 0.0]
    assert stdout.count("Epoch 5/5") == 1  # the progress bar is the chief's alone
    assert os.listdir(base / "rank1") == []  # other ranks write nothing
    assert sorted(os.listdir(base / "rank0")) == (["ckpt.keras"] if checkpoint else [])
    if checkpoint:
        _assert_checkpoint_holds(base / "rank0" / "ckpt.keras", digests[0])


def _assert_checkpoint_holds(path, digest):
    """The chief's last checkpoint holds the final weights every rank agreed on."""
    script = ("import sys, keras; sys.path.insert(0, sys.argv[2]); "
              "from horovod_train import metrics; import horovod_train.keras; "
              "print(metrics.weight_digest(keras.models.load_model(sys.argv[1]).weights))")
    proc = run_cli([sys.executable, "-c", script, str(path), ROOT], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == digest


def test_accumulation_over_ranks_equals_one_large_batch(gloo_session):
    """2 ranks x 2 accumulated micro-batches of 6 == one process with batches of 24
    (float32 SGD), identical on both ranks: the wrapper averages, accumulates, and
    reduces inside tf.cond under Horovod, with and without the XLA split, and Horovod's
    summing backward_passes_per_step is the same update at half the rate; the broadcast
    makes different initial weights rank 0's. Under mixed_float16 without XLA, one rank's
    poisoned update is skipped by both (one skip, the scale halved, identical weights)."""
    # keras_accumulation_worker.py, a job of the Gloo rank session (conftest.py).
    result = json.loads((gloo_session.job_dir("keras_accumulation") / "result.json").read_text())
    assert result["moved"] > 1e-2, result
    for other in ("adam", "momentum"):  # another run each
        assert result[other]["digests"][0] != result["accum"]["digests"][0]
    for name, updates in {"accum": 8, "accum_xla": 8, "passes_sum": 16, "accum_sharded": 8,
                          "adam": 8, "adam_sharded": 8, "momentum": 16,
                          "momentum_sharded": 16}.items():
        run = result[name]  # passes_sum: iterations counts backward passes, as Horovod's
        assert len(set(run["digests"])) == 1 and run["updates"] == updates, (name, run)
        assert run["gap"] < 1e-5, (name, run)
    assert result["accum_xla"]["split"] == "SplitTrainStep"
    # mixed_float16 without XLA: rank 1's poisoned update is skipped by both ranks.
    fp16 = result["fp16_skip"]
    assert fp16["compute_dtype"] == "float16" and len(set(fp16["digests"])) == 1, fp16
    assert fp16["skipped"] == [1.0, 1.0] and fp16["scale"] == [2.0 ** 14] * 2, fp16


def test_horovod_keras_layer_still_diverges_under_keras3(gloo_session):
    """The failure horovod_train.keras replaces (see docs/keras.md).

    horovod.tensorflow.keras.DistributedOptimizer (Horovod 0.28.1) hooks the Keras 2
    gradient path (get_gradients / _compute_gradients), which Keras 3's model.fit never
    calls: fit runs without error and no gradient is ever averaged, so replicas that
    start identical end with different weights. Its BroadcastGlobalVariablesCallback
    fails outright, because a Keras 3 variable wraps a tf.Variable and has no `.ref`.
    If this test fails, Horovod has fixed its Keras layer: revisit why we exist."""
    # horovod_keras_worker.py, a job of the Gloo rank session (conftest.py).
    result = json.loads((gloo_session.job_dir("horovod_keras") / "result.json").read_text())
    assert len(result["digests"]) == 2
    assert result["digests"][0] != result["digests"][1], "Horovod's Keras layer kept ranks in sync"
    assert "has no attribute 'ref'" in result["broadcast"]
