"""One rank of test_gloo_reductions.py: Horovod's own allreduce of rank-dependent tensors
under every reduction op, dtype and a size on each side of the two-rank exchange's limit
(scripts/horovod-patches/gloo-pair-exchange.patch), plus signed zeros and NaNs under
Min/Max. Every rank rebuilds every other rank's inputs from their seeds, so it checks its
result against numpy's reduction of all of them; writes OUT/rank<r>.json with, per case,
that verdict and the SHA-256 of the bytes it received."""
import hashlib
import json
import os
import sys

import numpy as np

import horovod.tensorflow as hvd
import tensorflow as tf

PAIR_LIMIT_BYTES = 1 << 20  # kPairAllreduceMaxBytes in the patch
OPS = {"sum": (hvd.Sum, np.add), "min": (hvd.Min, np.minimum), "max": (hvd.Max, np.maximum),
       "product": (hvd.Product, np.multiply)}
DTYPES = (np.float32, np.float16, np.int32)


def values(rank: int, dtype, count: int, op: str):
    rng = np.random.default_rng(1000 * rank + count)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, count).astype(dtype)
    if op == "product":  # near 1, so a product of a few stays finite
        return rng.uniform(0.9, 1.1, count).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def counts(dtype) -> list:
    """Element counts: tiny, at the exchange's limit, and just past it (the ring)."""
    at_limit = PAIR_LIMIT_BYTES // np.dtype(dtype).itemsize
    return [1, 1000, at_limit, at_limit + 1]


def case(name: str, mine, everyone: list, op: str, tol: float) -> dict:
    got = hvd.allreduce(tf.constant(mine), op=OPS[op][0], name=name).numpy()
    want = everyone[0]
    for other in everyone[1:]:
        want = OPS[op][1](want, other)
    ok = bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                          atol=tol, equal_nan=True))
    return {"name": name, "ok": ok, "digest": hashlib.sha256(got.tobytes()).hexdigest()}


def special(rank: int) -> np.ndarray:
    """Signed zeros and NaNs, placed so that the two ranks' operands differ in order."""
    table = [[0.0, -0.0, np.nan, 1.0], [-0.0, 0.0, 2.0, np.nan]]
    return np.array(table[rank % 2], np.float32)


def main(out: str) -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    results = []
    for dtype in DTYPES:
        # A sum of `size` values rounds differently by order beyond 2 ranks.
        tol = 0.0 if size == 2 or np.issubdtype(dtype, np.integer) else \
            8 * float(np.finfo(dtype).eps)
        for count in counts(dtype):
            for op in OPS:
                if op == "product" and np.issubdtype(dtype, np.integer):
                    continue  # overflows
                everyone = [values(r, dtype, count, op) for r in range(size)]
                name = f"{np.dtype(dtype).name}_{count}_{op}"
                results.append(case(name, everyone[rank], everyone, op, tol))
    for op in ("min", "max"):  # the same bits on every rank, whatever numpy says of -0
        got = hvd.allreduce(tf.constant(special(rank)), op=OPS[op][0], name=f"special_{op}")
        results.append({"name": f"special_{op}", "ok": True,
                        "digest": hashlib.sha256(got.numpy().tobytes()).hexdigest()})
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "size": size, "cases": results}, f)


if __name__ == "__main__":
    main(sys.argv[1])
