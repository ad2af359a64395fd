"""The MWMS communicator (backends/mwms_comm.py) on real workers.

One job per world size (2 workers, in the MWMS rank session of conftest.py, then 3)
runs every case of mwms_ops_worker.CASES eagerly and inside a tf.function; each test
checks what every rank wrote against values computed here with numpy from the same
inputs, bit for bit.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT, child_env
from mwms_ops_worker import CASES, LOOP_CALLS, inputs
from ranks import free_ports, tf_config


WORKER = f"{ROOT}/tests/multiprocess/mwms_ops_worker.py"


def three_hosts_config(ports, index: int) -> str:
    """Worker 2 names its host 127.0.0.1: two distinct hosts for cross() to count."""
    hosts = ["localhost", "localhost", "127.0.0.1"]
    return json.dumps({"cluster": {"worker": [f"{h}:{p}" for h, p in zip(hosts, ports)]},
                       "task": {"type": "worker", "index": index}})


def run_workers(n: int, out_dir, timeout: float = 240) -> list[dict]:
    """Starts n workers on free ports, waits for all; every rank's results in rank order."""
    ports = free_ports(n)
    config = three_hosts_config if n == 3 else tf_config
    procs = [subprocess.Popen([sys.executable, WORKER, str(out_dir)], cwd=ROOT,
                              env=child_env(TF_CONFIG=config(ports, i)),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    try:
        errors = [p.communicate(timeout=timeout)[1] for p in procs]
    finally:
        for p in procs:  # a hung or failed job: its workers end with it
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (p, err) in enumerate(zip(procs, errors)):
        assert p.returncode == 0, f"worker {i} exited {p.returncode}:\n{err[-5000:]}"
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}_workers")
def world(request, tmp_path_factory, mwms_session) -> list[dict]:
    """2 workers: the mwms_ops job of the MWMS rank session (conftest.py); 3 workers (two
    hosts' names): a job of their own."""
    if request.param == 2:
        out = mwms_session.job_dir("mwms_ops")
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return run_workers(request.param, tmp_path_factory.mktemp(f"ops{request.param}"))


# ---- the expected values, from the inputs alone ----------------------------------
def reduced(op: str, arrays):
    stack = np.stack(arrays)
    if op == "AVERAGE":
        return (stack.sum(0) / len(arrays)).astype(stack.dtype)
    combine = {"SUM": np.sum, "MIN": np.min, "MAX": np.max, "PRODUCT": np.prod}[op]
    return combine(stack, axis=0).astype(stack.dtype)


def expected(spec, rank: int, size: int):
    every = [inputs(r, size) for r in range(size)]
    kind, *args = spec
    if kind == "allreduce":
        op, name, pre, post = args
        dtype = every[0][name].dtype
        scaled = [e[name] * dtype.type(pre) for e in every]
        return (reduced(op, scaled) * dtype.type(post)).astype(dtype)
    if kind == "grouped_allreduce":
        return [reduced(args[0], [e[name] for e in every]) for name in args[1]]
    if kind == "twice":
        return [reduced("SUM", [e[args[0]] for e in every]),
                reduced("SUM", [2 * e[args[0]] for e in every])]
    if kind == "while":  # 4 iterations of allreduce(x + i)
        return sum(reduced("SUM", [e[args[0]] + np.float32(i) for e in every]) for i in range(4))
    if kind == "allgather":
        return np.concatenate([np.atleast_1d(e[args[0]]) for e in every])
    if kind == "broadcast":
        return every[args[1] % size][args[0]]
    if kind == "grouped_broadcast":
        return [every[args[1] % size][name] for name in args[0]]
    if kind == "reducescatter":
        # Lower ranks take the extra rows, as np.array_split does.
        return np.array_split(reduced(args[0], [e[args[1]] for e in every]), size)[rank]
    raise ValueError(kind)


def assert_exact(got, want, where: str):
    """Same dtype, shape and bytes (so -0.0, inf and nan are checked too)."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: got {got}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_exact(g, w, f"{where}[{i}]")
        return
    want = np.asarray(want)
    array = np.array(got["value"], dtype=got["dtype"]).reshape(got["shape"])
    assert (array.dtype, array.shape) == (want.dtype, want.shape) \
        and array.tobytes() == want.tobytes(), f"{where}: got {array!r}, expected {want!r}"


# ---- the tests ----------------------------------------------------------------------
def test_every_op_gives_the_exact_values_eagerly_and_in_a_tf_function(world):
    size = len(world)
    for result in world:
        rank = result["rank"]
        assert result["size"] == size
        assert sorted(result["cases"]) == sorted(CASES)
        for name, spec in CASES.items():
            want = expected(spec, rank, size)
            for variant in ("eager", "fn"):
                assert_exact(result["cases"][name][variant], want, f"rank {rank} {name} {variant}")


def test_fifty_eager_calls_reuse_each_shapes_key(world):
    """Three shapes in turn: each key is reused, and no shape meets another's key."""
    total = sum(r + 1 for r in range(len(world)))
    want = [[float(i * total)] * (1 + i % 3) for i in range(LOOP_CALLS)]
    for result in world:
        assert result["loop"] == want


def test_broadcast_variables_copies_root_1_into_tf_and_keras_variables(world):
    root = inputs(1, len(world))
    for result in world:
        for variant, values in result["broadcast_variables"].items():
            assert_exact(values, [root["f32"], root["i32"]],
                         f"rank {result['rank']} broadcast_variables {variant}")


def test_adasum_is_refused_naming_mwms(world):
    for result in world:
        for where, refusal in result["adasum"].items():
            assert refusal is not None, f"{where}: op=hvd.Adasum ran under mwms"
            kind, message = refusal
            # Inside a tf.function AutoGraph re-raises the UsageError as a StagingError
            # that carries its message.
            assert kind == ("StagingError" if where.endswith("_fn") else "UsageError"), refusal
            assert "op=hvd.Adasum" in message and "'mwms' backend" in message, message


def test_facts_are_false_and_cross_counts_distinct_hosts(world):
    # The 3-worker job names worker 2's host 127.0.0.1, the others localhost.
    crosses = [(0, 1), (0, 1)] if len(world) == 2 else [(0, 2), (0, 2), (1, 2)]
    for result, cross in zip(world, crosses):
        assert result["facts"] and not any(result["facts"].values()), result["facts"]
        assert tuple(result["cross"]) == cross
