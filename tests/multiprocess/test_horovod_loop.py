"""Horovod's background loop as scripts/horovod-patches leaves it, on 2 real ranks.

- hvd.init() again in the same horovodrun --gloo job (what an elastic reset does) meets the
  peer: the rendezvous server forgets each scope's addresses once all its ranks are done.
- An enqueued tensor wakes the loop: with HOROVOD_CYCLE_TIME at 1 s, a small allreduce takes
  milliseconds, not up to a cycle. The bound is 4x below the cycle, so load cannot make it
  flaky; the latencies themselves are bench/small_allreduce.py's job.
"""
import json
import os
import statistics
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import BIN

WORKER = os.path.join(ROOT, "tests", "multiprocess", "hvd_loop_worker.py")


def _results(out) -> list[dict]:
    ranks = sorted(p.name for p in out.iterdir())
    assert ranks == ["rank0.json", "rank1.json"], f"results from {ranks}"
    return [json.loads((out / name).read_text()) for name in ranks]


def _run(controller: str, mode: str, n: int, out, timeout: int, **env) -> list[dict]:
    pytest.importorskip("horovod.tensorflow")
    argv = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", f"--{controller}",
            sys.executable, WORKER, mode, str(n), str(out)]
    proc = run_cli(argv, timeout=timeout, env=child_env(TF_NUM_INTRAOP_THREADS=1, **env))
    assert proc.returncode == 0, \
        f"rc={proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return _results(out)


def test_gloo_init_again_in_the_same_job_meets_the_peer(gloo_session):
    # Each round's rendezvous must see this round's addresses: with the stock server, the
    # late rank read the other's address from the previous round and timed out connecting.
    # The Gloo rank session's last job (conftest.py: 6 rounds, HOROVOD_GLOO_TIMEOUT_SECONDS
    # 60). Horovod runs there from the earlier jobs: round 1's hvd.init() finds it running,
    # rounds 2-6 init again after a shutdown, as in a launch of their own.
    for result in _results(gloo_session.job_dir("hvd_loop_reinit")):
        assert result["sums"] == [3.0] * 6, result


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_an_enqueued_tensor_wakes_the_loop(tmp_path, controller):
    for result in _run(controller, "latency", 8, tmp_path, timeout=300,
                       HOROVOD_CYCLE_TIME=1000, OMPI_MCA_mpi_yield_when_idle=1):
        # Stock Horovod sleeps out the cycle: about 1 s each, back to back.
        assert statistics.median(result["seconds"]) < 0.25, (controller, result)
