"""One rank of test_packed_allreduce.py: our backend's gradient mean against Horovod's own
grouped allreduce of the same rank-dependent tensors, eager and in a tf.function, with and
without fp16 compression; writes OUT/rank<r>.json. Equal bit for bit is expected with a
power-of-two number of ranks (our 1 / size prescale is exact there), equal to rounding
otherwise."""
import json
import os
import sys

import numpy as np
import tensorflow as tf

from horovod_train.backends.horovod import HorovodBackend

SHAPES = [((3, 4), tf.float32), ((5,), tf.float32), ((2, 2, 2), tf.float16), ((7, 1), tf.float32),
          ((), tf.float32)]


def tensors(rank: int) -> list:
    rng = np.random.default_rng(100 + rank)  # each rank its own values
    return [tf.constant(rng.standard_normal(shape).astype(dtype.as_numpy_dtype))
            for shape, dtype in SHAPES]


def grouped_per_dtype(hvd, grads) -> list:
    """Horovod's grouped allreduce, one call per dtype (it refuses mixed dtypes)."""
    out = [None] * len(grads)
    for dtype in {g.dtype for g in grads}:
        index = [i for i, g in enumerate(grads) if g.dtype == dtype]
        for i, r in zip(index, hvd.grouped_allreduce([grads[i] for i in index], op=hvd.Average)):
            out[i] = r.numpy()
    return out


def _close(ours, theirs) -> bool:
    """Equal to the rounding of a division by the size done before or after the sum: a few
    units in the last place of values of order 1 (a mean near 0 keeps the inputs' error)."""
    tol = 4 * float(np.finfo(ours.dtype).eps)
    return ours.shape == theirs.shape and bool(np.allclose(ours, theirs, rtol=tol, atol=tol))


def main(out: str) -> None:
    backend = HorovodBackend(bucket_mb=0.00004)  # ~42 bytes: 2 buckets, one of mixed dtypes
    info = backend.setup()
    hvd = backend._hvd
    grads = tensors(info.rank)
    theirs = grouped_per_dtype(hvd, grads)
    ours = [t.numpy() for t in backend.allreduce_gradients(grads)]
    in_graph = [t.numpy() for t in tf.function(backend.allreduce_gradients)(grads)]
    whole = HorovodBackend()  # the default: one bucket here
    whole.setup()  # Horovod is running already: this only reads rank and size
    one_bucket = [t.numpy() for t in whole.allreduce_gradients(grads)]
    result = {"rank": info.rank,
              "shapes_dtypes_kept": all(o.shape == t.shape and o.dtype == t.dtype
                                        for o, t in zip(ours, theirs)),
              "equal_eager": all(np.array_equal(o, t) for o, t in zip(ours, theirs)),
              "equal_in_graph": all(np.array_equal(o, t) for o, t in zip(in_graph, theirs)),
              "equal_one_bucket": all(np.array_equal(o, t) for o, t in zip(one_bucket, theirs)),
              "close": all(_close(o, t) for got in (ours, in_graph, one_bucket)
                           for o, t in zip(got, theirs)),
              "digest": [o.tobytes().hex() for o in ours]}
    with open(os.path.join(out, f"rank{info.rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
