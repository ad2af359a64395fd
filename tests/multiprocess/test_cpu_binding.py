"""Ranks that share a CPU host bind to disjoint shares of its cores (horovod_train/cpus.py),
on 2 real ranks under horovodrun --gloo and --mpi; a launcher's own binding is kept.
Every rank's process mask and the mask of each of its threads (Horovod's background
thread, Gloo's event loop, TensorFlow's pools) are checked."""
import json
import os
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import BIN

WORKER = os.path.join(ROOT, "tests", "multiprocess", "cpu_bind_worker.py")
HOST = sorted(os.sched_getaffinity(0))


def _run(prefix: list, out, **env) -> list[dict]:
    pytest.importorskip("horovod.tensorflow")
    proc = run_cli(prefix + [sys.executable, WORKER, str(out)], timeout=300,
                   env=child_env(TF_NUM_INTRAOP_THREADS=1, **env))
    ranks = sorted(p.name for p in out.iterdir())
    assert proc.returncode == 0 and ranks == ["rank0.json", "rank1.json"], \
        f"rc={proc.returncode}, results from {ranks}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return [json.loads((out / name).read_text()) for name in ranks]


def _horovodrun(controller: str) -> list:
    return [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", f"--{controller}"]


@pytest.mark.skipif(len(HOST) < 2, reason=f"needs 2 CPUs to split; this process may use {HOST}")
@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_each_rank_and_all_its_threads_run_on_its_own_cores(tmp_path, controller):
    results = _run(_horovodrun(controller), tmp_path)
    masks = {r["local_rank"]: r["mask"] for r in results}
    assert set(masks[0]).isdisjoint(masks[1]), masks
    assert sorted(masks[0] + masks[1]) == HOST, masks  # no core left out
    for r in results:
        assert r["sum"] == 2.0, r
        assert len(r["threads"]) > 3, r  # Horovod's and TF's threads are there to check
        assert all(m == r["mask"] for m in r["threads"].values()), r
        assert r["said"].startswith("bound to CPU") and f"local rank {r['local_rank']} of 2" in r["said"], r


@pytest.mark.skipif(len(HOST) < 2, reason=f"needs 2 CPUs; this process may use {HOST}")
def test_the_users_choice_and_the_launchers_binding_are_kept(tmp_path):
    (tmp_path / "off").mkdir()
    for r in _run(_horovodrun("gloo"), tmp_path / "off", HOROVOD_TRAIN_CPU_BIND="none"):
        assert r["mask"] == HOST and "HOROVOD_TRAIN_CPU_BIND=none" in r["said"], r
    # Open MPI's own binding: each rank on one core of its choosing, which we keep.
    (tmp_path / "mpirun").mkdir()
    mpirun = ["mpirun", "-np", "2", "--bind-to", "core", "--map-by", "core",
              "-x", "PYTHONPATH", "-x", "PATH", "-x", "TF_NUM_INTRAOP_THREADS"]
    results = _run(mpirun, tmp_path / "mpirun")
    for r in results:
        assert len(r["mask"]) == 1 and "bound by the launcher" in r["said"], r
    assert results[0]["mask"] != results[1]["mask"], results
