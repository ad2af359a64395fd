"""One MWMS worker for test_mwms_tensor_ops.py: every case of CASES through MwmsComm,
eagerly and inside a tf.function (first dimensions left unknown, so keys and shapes are
dynamic there), on rank-dependent inputs; results as JSON into argv[1].

inputs() and CASES are numpy and plain data, so the test derives the exact expected
values from them without TensorFlow (this module imports TF only when run).
"""
import json
import os
import sys
import time

import numpy as np

OPS = ("AVERAGE", "SUM", "MIN", "MAX", "PRODUCT")


def inputs(rank: int, size: int) -> dict:
    v = rank + 1
    special = [-0.0, np.inf, np.nan] if rank == 1 else [1.0, 2.0, 3.0]
    return {
        "f32": np.array([[v, -v], [2.0, 0.5 * v]], np.float32),
        "i32": np.array([v, -v, 3], np.int32),
        "i8": np.array([v, -2 * v], np.int8),
        "f64": np.array([v, 1.0 / 3.0], np.float64),
        # Rank r sends r + 1 rows (uneven), or r rows (rank 0 sends none).
        "rows_f32": (10 * rank + np.arange(2 * v).reshape(v, 2)).astype(np.float32),
        "rows_i32": np.full([rank, 3], rank, np.int32),
        "rows_bool": np.array([rank % 2 == 0] * v),
        "scalar": np.float32(v),
        "special_f64": np.array(special, np.float64),
        "f16": np.array([v / 4, -v], np.float16),
        "bool": np.array([rank == 1, rank != 1, True]),
        "i64": np.array([[v * 10 ** 12]], np.int64),
        # 5 rows: split unevenly over 2 ranks (3, 2) and 3 ranks (2, 2, 1).
        "scatter": (v * np.arange(10).reshape(5, 2)).astype(np.float32),
    }


# name -> (kind, arguments); roots are ranks, or -1 for the last rank.
CASES = {
    **{f"allreduce_{op.lower()}_f32": ("allreduce", op, "f32", 1.0, 1.0) for op in OPS},
    **{f"allreduce_{op.lower()}_i32": ("allreduce", op, "i32", 1.0, 1.0)
       for op in ("SUM", "MIN", "MAX", "PRODUCT")},
    "allreduce_sum_i8": ("allreduce", "SUM", "i8", 1.0, 1.0),
    "allreduce_average_scaled": ("allreduce", "AVERAGE", "f32", 2.0, 0.25),
    "allreduce_sum_scaled_f64": ("allreduce", "SUM", "f64", 3.0, 0.5),
    "grouped_allreduce_sum": ("grouped_allreduce", "SUM", ["f32", "i32", "f64", "scatter"]),
    "grouped_allreduce_max": ("grouped_allreduce", "MAX", ["f32", "i32"]),
    "same_signature_twice": ("twice", "f32"),
    "while_loop_sum": ("while", "f32"),
    "allgather_rows_f32": ("allgather", "rows_f32"),
    "allgather_rows_i32": ("allgather", "rows_i32"),
    "allgather_rows_bool": ("allgather", "rows_bool"),
    "allgather_scalar": ("allgather", "scalar"),
    "broadcast_f32_root0": ("broadcast", "f32", 0),
    "broadcast_f32_root1": ("broadcast", "f32", 1),
    "broadcast_i32_root1": ("broadcast", "i32", 1),
    "broadcast_bool_root1": ("broadcast", "bool", 1),
    "broadcast_special_f64_root1": ("broadcast", "special_f64", 1),
    "broadcast_i64_last": ("broadcast", "i64", -1),
    "grouped_broadcast_root1": ("grouped_broadcast", ["f32", "i32", "bool", "f16", "i8"], 1),
    "reducescatter_sum": ("reducescatter", "SUM", "scatter"),
    "reducescatter_average": ("reducescatter", "AVERAGE", "scatter"),
    "reducescatter_max": ("reducescatter", "MAX", "scatter"),
}
LOOP_CALLS = 50


def encode(value):
    """A result as JSON: dtype, shape and values (json keeps -0.0, inf and nan)."""
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    array = np.asarray(value)
    return {"dtype": array.dtype.name, "shape": list(array.shape), "value": array.tolist()}


def case_fn(ops, spec, size):
    """(fn, input names) for one case: fn takes the inputs as tensors."""
    import tensorflow as tf
    from horovod_train.backends.comm import ReduceOp
    kind, *args = spec
    if kind == "allreduce":
        op, name, pre, post = args
        return (lambda x: ops.allreduce(x, ReduceOp[op], pre, post)), [name]
    if kind == "grouped_allreduce":
        return (lambda *xs: ops.grouped_allreduce(list(xs), ReduceOp[args[0]])), args[1]
    if kind == "twice":
        # One signature twice in one traced graph, the second through another
        # communicator: still two keys (the ordinal is per graph, not per object).
        again = type(ops)(ops.backend, ops.backend.collective, ops.backend.timeout_s)
        return (lambda x: [ops.allreduce(x, ReduceOp.SUM),
                           again.allreduce(2 * x, ReduceOp.SUM)]), args
    if kind == "while":
        def loop(x):  # a collective per iteration, one key for all of them
            def body(i, acc):
                return i + 1, acc + ops.allreduce(x + tf.cast(i, x.dtype), ReduceOp.SUM)
            return tf.while_loop(lambda i, acc: i < 4, body, (0, tf.zeros_like(x)))[1]
        return loop, args
    if kind == "allgather":
        return ops.allgather, args
    if kind in ("broadcast", "grouped_broadcast"):
        root = args[1] % size
        if kind == "broadcast":
            return (lambda x: ops.broadcast(x, root)), [args[0]]
        return (lambda *xs: ops.grouped_broadcast(list(xs), root)), args[0]
    if kind == "reducescatter":
        return (lambda x: ops.reducescatter(x, ReduceOp[args[0]])), [args[1]]
    raise ValueError(kind)


def run_cases(ops, mine, size) -> dict:
    import tensorflow as tf
    results = {}
    for name, spec in CASES.items():
        fn, names = case_fn(ops, spec, size)
        tensors = [tf.constant(mine[n]) for n in names]
        # First dimensions unknown when traced: shapes, and so keys, known only at run time.
        specs = [tf.TensorSpec(tf.TensorShape([None]).concatenate(t.shape[1:])
                               if t.shape.rank else [], t.dtype) for t in tensors]
        results[name] = {"eager": encode(fn(*tensors)),
                         "fn": encode(tf.function(fn, input_signature=specs)(*tensors))}
    return results


def run_extras(ops, rank, mine) -> dict:
    """Eager key reuse, broadcast_variables, the Adasum refusal, facts and cross."""
    import keras
    import tensorflow as tf
    from horovod_train.backends.comm import ReduceOp
    # Three shapes in turn, 50 calls: each shape's key is reused eagerly.
    loop = [ops.allreduce(tf.fill([1 + i % 3], float(i * (rank + 1))), ReduceOp.SUM).numpy()
            for i in range(LOOP_CALLS)]
    variables = {"eager": [tf.Variable(mine["f32"]), keras.Variable(mine["i32"])],
                 "fn": [tf.Variable(mine["f32"]), keras.Variable(mine["i32"])]}
    ops.broadcast_variables(variables["eager"], 1)
    tf.function(lambda: ops.broadcast_variables(variables["fn"], 1))()
    x = tf.constant(mine["scatter"])
    calls = {"allreduce": lambda: ops.allreduce(x, ReduceOp.ADASUM),
             "grouped_allreduce": lambda: ops.grouped_allreduce([x], ReduceOp.ADASUM),
             "reducescatter": lambda: ops.reducescatter(x, ReduceOp.ADASUM),
             "allreduce_fn": tf.function(lambda: ops.allreduce(x, ReduceOp.ADASUM))}
    refusals = {}
    for where, call in calls.items():
        try:
            call()
            refusals[where] = None
        except Exception as err:  # noqa: BLE001 - the test checks type and message
            refusals[where] = [type(err).__name__, str(err)]
    return {"loop": [v.tolist() for v in loop],
            "broadcast_variables": {k: encode([np.asarray(v.numpy()) for v in vs])
                                    for k, vs in variables.items()},
            "adasum": refusals, "facts": ops.facts(), "cross": list(ops.cross())}


def main(out_dir):
    # Joined as a script joins (htk.Strategy): a process may configure MWMS once, and in
    # a rank session (rank_session.py) the later jobs' hvd.init() joins this strategy.
    import horovod_train.keras as htk
    backend = htk.Strategy(backend="mwms", intra_op_threads=1,  # ranks share 2 cores
                           collective_timeout_s=90.0).backend
    info = backend.info
    ops = backend.comm
    mine = inputs(info.rank, info.size)
    result = {"rank": info.rank, "size": info.size, "cases": run_cases(ops, mine, info.size),
              **run_extras(ops, info.rank, mine)}
    path = os.path.join(out_dir, f"rank{info.rank}.json")
    with open(path + ".part", "w") as f:
        json.dump(result, f)
    os.replace(path + ".part", path)
    # Leave only once every rank has its results: a peer may still be pulling this
    # worker's part of the last collective from its server.
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(out_dir, f"rank{r}.json"))
                  for r in range(info.size)) and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[1])
