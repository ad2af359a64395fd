"""Horovod's Gloo allreduce on real ranks, as our build patches it: two ranks swap whole
buffers up to 1 MiB and reduce locally (gloo-pair-exchange.patch); larger buffers and other
rank counts keep Gloo's ring. Every op, dtype and size on either side of the limit gives
numpy's reduction of all ranks' inputs (exactly on 2 ranks, to rounding on 3), and every
rank receives the same bytes, signed zeros and NaNs under Min/Max included."""
import json
import os
import sys

import pytest

from helpers import ROOT, child_env, run_cli
from ranks import BIN

WORKER = os.path.join(ROOT, "tests", "multiprocess", "gloo_reduce_worker.py")


@pytest.mark.parametrize("np_", [2, 3])
def test_gloo_allreduce_matches_numpy_and_every_rank_gets_the_same_bytes(tmp_path, np_,
                                                                         gloo_session):
    """2 ranks: the gloo_reduce job of the Gloo rank session (conftest.py); 3 ranks: a
    launch of its own (another world)."""
    if np_ == 2:
        out = gloo_session.job_dir("gloo_reduce")
    else:
        out = tmp_path
        argv = [os.path.join(BIN, "horovodrun"), "-np", str(np_), "-H", f"localhost:{np_}",
                "--gloo", sys.executable, WORKER, str(out)]
        proc = run_cli(argv, timeout=300, env=child_env(TF_NUM_INTRAOP_THREADS=1))
        assert proc.returncode == 0, f"rc={proc.returncode}:\n{proc.stderr[-4000:]}"
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"rank{r}.json" for r in range(np_)], f"results {names}"
    ranks = [json.loads((out / n).read_text()) for n in names]
    cases = [{c["name"]: c for c in r["cases"]} for r in ranks]
    assert len(cases[0]) == 46 and all(c.keys() == cases[0].keys() for c in cases)
    wrong = [(r, name) for r, mine in enumerate(cases) for name, c in mine.items() if not c["ok"]]
    assert not wrong, f"results unlike numpy's: {wrong}"
    differ = [name for name in cases[0] if len({c[name]["digest"] for c in cases}) > 1]
    assert not differ, f"ranks received different bytes: {differ}"
