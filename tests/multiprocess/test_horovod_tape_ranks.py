"""Issue 40: a Horovod GradientTape script (horovod_style/tape_mnist_digits.py, `import
horovod_train.tensorflow as hvd`) on 2 real ranks under horovodrun --gloo, --mpi and as
2 MWMS workers (python -m launch run --backend mwms): the tape job of each launcher's
rank session (conftest.py), many checks.

Every rank runs in its own directory (rank0/, rank1/) and the checkpoint path is
relative, so a file written by a non-chief rank would show up in rank1/. Each rank
starts from its own random weights, so equal digests at the end mean the API made the
ranks equal; under gloo the script leaves its first-batch broadcast out, and the tape's
first-call broadcast must make them equal on its own.
"""
import json
import os
import re

import pytest

STEPS = 3 * (700 // 32)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind,broadcast", [("gloo", False), ("mpi", True), ("mwms", True)])
def test_tape_script_on_two_ranks(kind, broadcast, gloo_session, mpi_session, mwms_session):
    session = {"gloo": gloo_session, "mpi": mpi_session, "mwms": mwms_session}[kind]
    out = session.job_dir("tape")
    stdout = session.job_stdout("tape")
    # gloo runs the script without its first-batch broadcast (the module docstring).
    assert ("--no_broadcast" not in session.job_argv("tape")) is broadcast
    r0, r1 = (json.loads((out / f"result-{r}.json").read_text()) for r in range(2))

    # One model: identical weights, the same accuracy, every step applied once.
    assert r0["digest"] == r1["digest"], "ranks diverged"
    assert r0["size"] == r1["size"] == 2
    assert r0["optimizer_steps"] == r1["optimizer_steps"] == STEPS
    assert r0["accuracy"] == r1["accuracy"] >= 0.9, (r0["accuracy"], r1["accuracy"])
    # The chief alone prints and writes its checkpoint.
    assert re.search(r"Step #60\tLoss: [0-9.]+", stdout)
    assert len(re.findall(r"Step #0\t", stdout)) == 1
    assert os.listdir(out / "rank0") == ["checkpoint.weights.h5"]
    assert os.listdir(out / "rank1") == []

    # The collectives, by Horovod's meaning.
    c0, c1 = r0["collectives"], r1["collectives"]
    for c in (c0, c1):
        assert c["allreduce_sum"] == 1.0 and c["allreduce_avg"] == 0.5
        assert c["grouped"] == [2.0, 1.0]
        assert c["allgather_rows"] == [0.0, 1.0, 1.0]  # 1 row from rank 0, 2 from rank 1
        assert c["grouped_allgather"] == [3, 3]
        assert c["broadcast"] == 6.0  # from rank 1
        assert c["broadcast_object"] == {"from": 0}
        assert c["allgather_object"] == ["r0", "r1"]
        assert c["reducescatter"] == [3.0, 3.0]  # 1 + 2, this rank's 2 of 4 rows
        assert c["sparse_dense"] == [[0.5, 0.5], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
        # A local source's gradient stays local, divided by the rank count; a shared one is
        # the mean of (rank + 1) * (rows) over ranks: (1 * 2 + 2 * 3) / 2 = 4 per element.
        assert c["shared_grad"] == [4.0, 4.0, 4.0]
    assert c0["local_grad"] == [0.5, 0.5, 0.5] and c1["local_grad"] == [1.0, 1.0, 1.0]
    if kind != "mwms":  # Horovod refuses a tensor whose shape differs across ranks
        assert c0["shape_mismatch"] == c1["shape_mismatch"] == "FailedPreconditionError"
    assert c0["alltoall"] == [[0.0, 10.0], [1, 1]]
    assert c1["alltoall"] == [[1.0, 1.0, 11.0, 11.0], [2, 2]]
    if kind == "mwms":
        assert c0["join"].startswith("UsageError: hvd.join: received a call under the 'mwms'")
        assert "Fix: give every rank the same number of steps" in c0["join"]
    else:
        assert c0["join"] == c1["join"] in (0, 1)

    # A rank that changed a weight on its own is named by the guard, on every rank alike.
    assert r0["drift_error"] == r1["drift_error"]
    assert "ranks diverged: rank 1 holds other weights than rank 0" in r0["drift_error"]
    assert "checked at an in-step check of DistributedGradientTape" in r0["drift_error"]
