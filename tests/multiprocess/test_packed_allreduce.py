"""A bucket's gradients travel as one tensor (backends/horovod.py _packed_mean): on 2 real
ranks the means equal Horovod's own grouped allreduce of the same tensors, bit for bit, with
every shape and dtype kept, eager and in a tf.function, and every rank gets the same bytes.
On 3 ranks (where dividing each rank's part by the size before the sum rounds differently
from dividing the sum) they are equal to rounding, and still the same bytes on every rank."""
import json
import os
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import BIN

WORKER = os.path.join(ROOT, "tests", "multiprocess", "packed_worker.py")


def _ranks(out, np_: int) -> list:
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"rank{r}.json" for r in range(np_)], f"results {names}"
    ranks = [json.loads((out / n).read_text()) for n in names]
    assert all(r["digest"] == ranks[0]["digest"] for r in ranks), "ranks got different bytes"
    return ranks


def _run(tmp_path, controller: str, np_: int) -> list:
    pytest.importorskip("horovod.tensorflow")
    argv = [os.path.join(BIN, "horovodrun"), "-np", str(np_), "-H", f"localhost:{np_}",
            f"--{controller}", sys.executable, WORKER, str(tmp_path)]
    proc = run_cli(argv, timeout=300, env=child_env(TF_NUM_INTRAOP_THREADS=1))
    assert proc.returncode == 0, f"rc={proc.returncode}:\n{proc.stderr[-4000:]}"
    return _ranks(tmp_path, np_)


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_packed_means_equal_horovods_grouped_allreduce(controller, gloo_session, mpi_session):
    """The packed job of each controller's rank session (conftest.py)."""
    session = {"gloo": gloo_session, "mpi": mpi_session}[controller]
    for r in _ranks(session.job_dir("packed"), 2):
        assert r["shapes_dtypes_kept"] and r["equal_eager"] and r["equal_in_graph"] \
            and r["equal_one_bucket"], r


def test_packed_means_on_three_ranks_equal_to_rounding(tmp_path):
    for r in _run(tmp_path, "mpi", 3):
        assert r["shapes_dtypes_kept"] and r["close"], r
