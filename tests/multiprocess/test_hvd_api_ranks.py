"""Horovod's Keras API (`import horovod_train.keras as hvd`) on real ranks: horovodrun
--gloo and --mpi, and two MWMS workers (TF_CONFIG) for what MWMS can do. Every rank's
answers are checked against exact values (tests/multiprocess/hvd_api_worker.py, the
hvd_api job of each launcher's rank session in conftest.py)."""
import json

import pytest


def api_ranks(session) -> list[dict]:
    """Every rank's answers from the session's hvd_api job (hvd_api_worker.py)."""
    out = session.job_dir("hvd_api")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def check_collectives(c):
    assert c["average"] == [1.5, 3.0] and c["sum"] == [3.0, 6.0] == c["average_false"]
    assert c["min"] == [1.0, 2.0] and c["max"] == [2.0, 4.0]
    assert c["scaled"] == [3.0, 6.0]  # (2x summed) / 2
    assert c["fp16"] == [1.5, 3.0]
    assert c["grouped"] == [[3.0, 6.0], [[1.0, 1.0], [1.0, 1.0]]]
    assert c["allgather"] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]  # 1 row, then 2
    assert c["broadcast"] == [10, 7]  # from rank 1
    assert c["object"] == {"from": 0} and c["objects"] == ["r0", "r1"]
    assert c["graph_sum"] == [3.0, 6.0] and c["graph_allgather"] == [[1.0, 2.0], [2.0, 4.0]]
    assert c["broadcast_variables"] == [1.0, 1.0]


@pytest.fixture(scope="module")
def gloo_ranks(gloo_session):
    """The Gloo session's hvd_api job runs the API checks, then the perturbed fits (the
    tests below)."""
    return api_ranks(gloo_session)


@pytest.mark.parametrize("launcher", ["gloo", "mpi", "mwms"])
def test_the_api_answers_alike_on_every_rank(launcher, gloo_session, mpi_session, mwms_session):
    # Each launcher's rank session (conftest.py); all three are asked for by name, so
    # pytest-xdist keeps them in one worker (tests/worker_groups.py).
    ranks = api_ranks({"gloo": gloo_session, "mpi": mpi_session, "mwms": mwms_session}[launcher])
    for r, res in enumerate(ranks):
        assert (res["rank"], res["size"], res["local_rank"], res["local_size"]) == (r, 2, r, 2)
        assert res["cross"] == [0, 1]
        assert res["facts"] == {"mpi": launcher == "mpi", "gloo": launcher == "gloo",
                                "nccl": False}
        check_collectives(res["collectives"])
        # Sum over ranks of rows 0..3 times (rank + 1): rank r keeps rows 2r, 2r+1.
        assert res["collectives"]["reducescatter"] == [[3.0 * (2 * r)], [3.0 * (2 * r + 1)]]
        # Averaged over ranks ((1 + 2) / 2 = 1.5 times the row), rows 0-2 to rank 0, 3-4 to 1.
        mine = [[0.0], [1.5], [3.0]] if r == 0 else [[4.5], [6.0]]
        assert res["collectives"]["reducescatter_uneven"] == mine
        el = res["elastic"]
        assert (el["batch"], el["epoch"]) == (20, 10) and el["restored_equal"] and el["committed_kept"]
        assert res["load_model"] == {"wrapped": "DistributedOptimizer", "inner": "SGD",
                                     "same_weights": True}
    assert ranks[0]["elastic"]["synced"] == ranks[1]["elastic"]["synced"]
    if launcher == "mwms":  # no timeline there: the error names the backend
        assert all("'mwms' backend" in res["timeline"] for res in ranks)
    else:
        assert all(res["timeline"] == "ok" for res in ranks)


@pytest.mark.parametrize("mode", ["perturb", "instep", "elastic"])
def test_a_perturbed_rank_stops_every_rank_at_the_next_check(gloo_ranks, mode):
    for res in gloo_ranks:
        fit = res[f"fit_{mode}"]
        assert fit["stopped"] and fit["message"], fit
        # Caught at the first check after the change: with the callback, the end of
        # training (12 updates: epoch ends are checked at most once per 100 updates);
        # without it, the optimizer's in-step check at update 8.
        assert fit["updates"] == (12 if mode == "perturb" else 8), fit
        # The in-step check stops Keras's own loop with an assertion; a caller holding
        # the optimizer (hvd.elastic.run) raises the typed error from its verdict tensor.
        typed = mode != "instep"
        assert fit["type"] == ("RanksDiverged" if typed else "InvalidArgumentError"), fit
        assert fit["verdict"] == ([[1], 12 if mode == "perturb" else 8] if typed
                                  else [None, None]), fit
