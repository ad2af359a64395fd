"""Horovod-style Keras scripts (horovod_style/, `import horovod_train.keras as hvd`) on 2
real ranks under horovodrun --gloo and --mpi: what a Horovod user's script expects of
the API, as scripts/run_horovod_examples.py checks it on Horovod's own examples.

The scripts are jobs of the rank sessions (conftest.py, STYLE_JOBS): each rank runs in its
own directory (rank0/, rank1/) and the checkpoint path is relative, so a file written by
a non-chief rank would show up in rank1/. Each script starts every rank from its own
random weights, so equal digests at the end mean the API made the ranks equal.
"""
import json
import os
import re

import pytest

from scenarios import STYLE_EPOCHS as EPOCHS

# horovodrun's prefix of a rank's line: [R]<stdout>: under gloo, [JOB,R]<stdout>: under mpi.
TAG = re.compile(r"^\[(?:\d+,)?(\d+)\]<stdout>:(.*)$", re.M)


def session_run(session, name):
    """A script's job in a rank session (conftest.py, STYLE_JOBS): (its stdout, [result of
    rank 0, rank 1], its dir)."""
    base = session.job_dir(name)
    results = [json.loads((base / f"result-{rank}.json").read_text()) for rank in range(2)]
    return session.job_stdout(name), results, base


def ranks_printing(stdout, text):
    return sorted({int(rank) for rank, line in TAG.findall(stdout) if text in line})


@pytest.mark.parametrize("controller,broadcast", [("gloo", True), ("mpi", True),
                                                  ("gloo", False)])
def test_digits_script_trains_identical_replicas(controller, broadcast, gloo_session,
                                                 mpi_session):
    """Identical weights on both ranks (without the broadcast callback too: the
    DistributedOptimizer broadcasts rank 0's state at its first apply), >= 0.9 test
    accuracy, the warmed-up lr at lr x size, and the chief's checkpoints alone."""
    session = {"gloo": gloo_session, "mpi": mpi_session}[controller]
    name = "style_digits" if broadcast else "style_digits_no_broadcast"
    assert ("--no_broadcast" in session.job_argv(name)) is not broadcast
    stdout, results, base = session_run(session, name)
    digests = [r["digest"] for r in results]
    assert digests[0] == digests[1], f"ranks diverged: {digests}"
    assert [r["size"] for r in results] == [2, 2]
    assert results[0]["steps"] == results[1]["steps"] == EPOCHS * (700 // 32)
    assert results[0]["accuracy"] >= 0.9, results
    assert results[0]["accuracy"] == results[1]["accuracy"]  # same weights, same test set
    assert results[0]["lr"] == pytest.approx(0.002 * 2)  # warmup reached the scaled lr
    assert ranks_printing(stdout, f"Epoch {EPOCHS}/{EPOCHS}") == [0]  # chief's progress only
    assert sorted(os.listdir(base / "rank0")) == \
        sorted(f"checkpoint-{e}.h5" for e in range(1, EPOCHS + 1))
    assert os.listdir(base / "rank1") == []


@pytest.mark.parametrize("controller,fp16", [("gloo", True), ("mpi", False)])
def test_synthetic_benchmark_prints_img_sec_from_rank0(controller, fp16, gloo_session,
                                                       mpi_session):
    """Identical weights after hvd.broadcast of each weight and the allreduced training (fp16
    compression of the gradients too); img/sec averaged by hvd.allreduce, printed by rank
    0 alone; nothing written in the rank directories."""
    session = {"gloo": gloo_session, "mpi": mpi_session}[controller]
    assert ("--fp16_allreduce" in session.job_argv("style_benchmark")) is fp16
    stdout, results, base = session_run(session, "style_benchmark")
    assert results[0]["digest"] == results[1]["digest"], results
    assert results[0]["steps"] == results[1]["steps"] == 1 + 2 + 3 * 3
    assert results[0]["img_sec"] == pytest.approx(results[1]["img_sec"])  # allreduced
    assert results[0]["img_sec"] > 0
    assert ranks_printing(stdout, "img/sec") == [0]
    assert ranks_printing(stdout, "Total img/sec on 2 rank(s)") == [0]
    assert os.listdir(base / "rank0") == os.listdir(base / "rank1") == []
