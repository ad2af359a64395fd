"""The divergence guard: ranks never silently train different models.

Data-parallel ranks stay identical only because each applies the same reduced
gradients to the same weights. A rank that applies its own gradients (an optimizer not
wrapped for the job), or whose model changes alone (weights loaded from a rank-local
file, a state that was never broadcast), goes on training without any error: the job
ends with as many models as ranks and reports one. So the trainers compare a cheap
checksum of the trainable weights across ranks at epoch ends (and, if asked, every N
steps) and stop every rank when one differs.

Backend-blind: one allreduce_mean through the Backend interface. TensorFlow is imported
where it is used, so the CLI's exit path and the pure tests import this module without it.
"""
import numpy as np

# A new exit code (README, exit codes): relaunching would diverge again, so it is
# neither 75 (a peer was lost) nor 1 (a crash).
EXIT_RANKS_DIVERGED = 4

# Elements one output of an inner-dimension reduce sums, in one fixed order. A full
# reduce_sum on CPU splits its input into one block per thread, so the rounding of its
# result depends on the intra-op thread count, which differs between hosts with other
# core counts: identical weights would compare unequal and stop a healthy job. The sums
# of rows are computed per row whatever the thread count, so summing in rows of _ROW,
# then the rows' sums in rows of _ROW, ..., rounds the same on every rank.
_ROW = 1024
# At most this many ranks are listed by number in the message.
_LISTED = 8


def _row_sums(pair, n: int):
    """[2, n] float64 -> [2, ceil(n / _ROW)]: sums of consecutive rows of _ROW."""
    import tensorflow as tf
    pad = -n % _ROW
    if pad:  # zeros add nothing and keep the rows' boundaries fixed
        pair = tf.pad(pair, [[0, 0], [0, pad]])
    return tf.reduce_sum(tf.reshape(pair, [2, -1, _ROW]), axis=2)


def _sum_and_squares(variable):
    """[sum, sum of squares] of one variable in float64, in a thread-count-free order."""
    import tensorflow as tf
    x = tf.reshape(tf.cast(variable, tf.float64), [-1])
    pair = tf.stack([x, x * x])  # float32 squares are exact in float64
    n = x.shape.num_elements()
    if n is None:  # a tensor of unknown size (never a variable): one plain reduce
        return tf.reduce_sum(pair, axis=1)
    while n > _ROW:
        pair, n = _row_sums(pair, n), -(-n // _ROW)
    return tf.reduce_sum(pair, axis=1)  # one row per output: a fixed order


def checksum(variables):
    """float64 [sum of all values, sum of their squares] over `variables` (Keras 3
    variables, tf.Variables or tensors). Works eagerly and inside a tf.function; one
    pass over each variable. Identical weights give identical bits on every rank that
    runs on the same kind of device."""
    import tensorflow as tf
    parts = [_sum_and_squares(v) for v in variables]
    if not parts:
        return tf.zeros([2], tf.float64)
    return tf.add_n(parts) if len(parts) > 1 else parts[0]


def gather(backend, local_checksum) -> np.ndarray:
    """Every rank's checksum, as a [size, 2] float64 array on every rank: this rank's in
    its own row of a zero table, one allreduce_mean, times size.

    Every row goes through the same arithmetic (zeros added, divided and multiplied by
    size), so identical checksums give bit-identical rows. For sizes that are not a
    power of two the division can round: two checksums a unit in the last place apart
    may then compare equal. A real divergence moves the sums far more than that."""
    import tensorflow as tf
    size, rank = backend.info.size, backend.info.rank
    table = np.zeros((size, 2), np.float64)
    table[rank] = np.asarray(local_checksum, np.float64)
    return backend.allreduce_mean(tf.constant(table)).numpy() * size


def differing_ranks(rows) -> list[int]:
    """The ranks whose row differs from rank 0's in any bit (NaNs included: the same
    NaN on every rank is the same weights)."""
    rows = np.ascontiguousarray(rows, np.float64)
    first = rows[0].tobytes()
    return [rank for rank in range(1, len(rows)) if rows[rank].tobytes() != first]


def _named(ranks) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:_LISTED])
    more = f", ... ({len(ranks)} ranks)" if len(ranks) > _LISTED else ""
    return f"ranks {shown}{more}"


def message(ranks, step: int, where: str) -> str:
    """The one line every rank prints when the guard stops the job."""
    ranks = list(ranks)
    verb = "holds" if len(ranks) == 1 else "hold"
    return (f"ranks diverged: {_named(ranks)} {verb} other weights than rank 0 (checksum of "
            f"the trainable weights) at step {step}, checked at {where}; expected identical "
            f"weights on every rank. Likely causes: a rank applied its own gradients (an "
            f"optimizer not wrapped for the job), a model or its weights changed on one rank "
            f"only (e.g. loaded from a rank-local file), or the initial state was not "
            f"broadcast from rank 0; non-deterministic ops are not a cause, since every rank "
            f"applies the same reduced gradients. The job stops (exit {EXIT_RANKS_DIVERGED}) "
            f"because the ranks would train different models. Fix: wrap the optimizer, load "
            f"weights on every rank or broadcast them from rank 0 after loading, then relaunch")


class RanksDiverged(RuntimeError):
    """Some rank's weights differ from rank 0's; every rank raises it at the same check."""

    def __init__(self, ranks, step: int, where: str = "a check"):
        self.ranks, self.step, self.where = list(ranks), step, where
        super().__init__(message(self.ranks, step, where))


def _has_peers(backend) -> bool:
    """More than one rank, reached by a collective. The base class's allreduce_mean is
    the one-process identity (its defaults are "no communication"): a backend that keeps
    it has nobody to compare with, whatever its info says (a test that re-forms a
    "ring" of two in one process), and a gathered table would hold zeros for the peer."""
    from horovod_train.backends.base import Backend
    return backend.info.size > 1 and \
        type(backend).allreduce_mean is not Backend.allreduce_mean


def check(backend, variables, step: int, where: str):
    """Compares `variables` across ranks, eagerly; raises RanksDiverged on every rank
    if any rank's differ (all ranks hold the same gathered rows, so all decide alike).
    Returns the rows, or None without peers (one rank: no collective)."""
    if not _has_peers(backend):
        return None
    rows = gather(backend, checksum(variables))
    ranks = differing_ranks(rows)
    if ranks:
        raise RanksDiverged(ranks, step, where)
    return rows
