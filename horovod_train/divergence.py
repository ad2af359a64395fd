"""The divergence guard: ranks never silently train different models.

Data-parallel ranks stay identical only because each applies the same reduced
gradients to the same weights. A rank that applies its own gradients (an optimizer not
wrapped for the job), or whose model changes alone (weights loaded from a rank-local
file, a state that was never broadcast), goes on training without any error: the job
ends with as many models as ranks and reports one. So the trainers compare a cheap
checksum of the trainable weights across ranks at epoch ends (and, if asked, every N
steps) and stop every rank when one differs.

Backend-blind: one allgather through the backend's communicator. TensorFlow is imported
where it is used, so the CLI's exit path and the pure tests import this module without it.
"""
import numpy as np

# A new exit code (README, exit codes): a relaunch meets the same cause again, so it is
# not 75 (a peer was lost: relaunch), and it is no crash (1).
EXIT_RANKS_DIVERGED = 4

# A full reduce_sum on CPU splits its input into one block per thread, so the rounding
# of its result depends on the intra-op thread count, which differs between hosts with
# other core counts: identical weights would compare unequal and stop a healthy job.
# The sum of each row of a [k, _ROW] matrix is computed by one thread in one order, and
# a full reduce of at most _ROW elements is too small for Eigen to split: summing in
# rows of _ROW, then the rows' sums in rows of _ROW, ..., rounds the same on every rank.
_ROW = 1024
# An epoch-end check costs one checksum and one small allreduce (5-60 ms on a loaded
# 2-core host); epochs of a dozen steps would pay more than 1% of their time for it.
# So an epoch end is compared only when the epoch crossed a multiple of this many steps,
# and the first epoch end and the last step always are. Both trainers follow this rule.
MIN_STEPS_BETWEEN_EPOCH_CHECKS = 100
# The Keras drop-in's in-step check period (DistributedOptimizer updates), for scripts
# whose fit runs none of the checking callbacks: rare enough to cost nothing
# measurable, often enough to stop a long run early.
DEFAULT_IN_STEP_CHECK_STEPS = 1000
# At most this many ranks are listed by number in the message.
_LISTED = 8


def _fixed_order_sum(x, n: int):
    """The sum of a 1-D float64 tensor of static length n, in an order that does not
    depend on the thread count."""
    import tensorflow as tf
    while n > _ROW:
        full = n // _ROW * _ROW
        # A leading slice shares x's buffer: no copy of the bulk, unlike a pad.
        rows = tf.reduce_sum(tf.reshape(x[:full], [-1, _ROW]), axis=1)
        if full < n:  # the tail, summed alone, is one more row
            rows = tf.concat([rows, tf.reduce_sum(x[full:], keepdims=True)], 0)
        x, n = rows, -(-n // _ROW)
    return tf.reduce_sum(x)


def _sum_and_squares(variable):
    """[sum, sum of squares] of one variable in float64."""
    import tensorflow as tf
    x = tf.reshape(tf.cast(variable, tf.float64), [-1])
    n = x.shape.num_elements()
    if n is None:  # a tensor of unknown size (never a variable): plain reduces
        return tf.stack([tf.reduce_sum(x), tf.reduce_sum(x * x)])
    # float32 squares are exact in float64.
    return tf.stack([_fixed_order_sum(x, n), _fixed_order_sum(x * x, n)])


def checksum(variables):
    """float64 [sum of all values, sum of their squares] over `variables` (Keras 3
    variables, tf.Variables or tensors). Works eagerly and inside a tf.function. Cheap:
    per variable a cast, a square and two row-wise reduces (the levels after the first
    sum a thousandth of it). Identical weights give identical bits on every rank that
    runs on the same kind of device, whatever its thread count."""
    import tensorflow as tf
    parts = [_sum_and_squares(v) for v in variables]
    if not parts:
        return tf.zeros([2], tf.float64)
    return tf.add_n(parts) if len(parts) > 1 else parts[0]


_COMPILED = []  # checksum as a tf.function, built at first use (TF is imported lazily)


def _plain(variable):
    """A tf.function input: a tf.Variable as is, a Keras 3 variable's tf.Variable (its
    .value; a tf.Variable's own .value is a method), anything else as a tensor."""
    import tensorflow as tf
    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, "value", None)
    return inner if isinstance(inner, tf.Variable) else tf.convert_to_tensor(variable)


def _compiled_checksum(variables):
    """checksum(variables) as one graph: the same kernels in the same order as eagerly
    (the same bits), without an eager dispatch per op (about 600 for ResNet-18, where
    the eager check took 1.5x as long; 2x for digits_cnn).
    Traced once per list of shapes; never with relaxed shapes, which would leave sizes
    unknown and the order to the thread count."""
    if not _COMPILED:
        import tensorflow as tf
        _COMPILED.append(tf.function(checksum))
    return _COMPILED[0]([_plain(v) for v in variables])


def gather(backend, local_checksum) -> np.ndarray:
    """Every rank's checksum, as a [size, 2] float64 array on every rank (one allgather:
    the bits each rank computed, moved, never added)."""
    from horovod_train import metrics
    return metrics.gather_rows(backend, np.asarray(local_checksum, np.float64))


def differing_ranks(rows) -> list[int]:
    """The ranks whose row differs from rank 0's in any bit (NaNs included: the same
    NaN on every rank is the same weights)."""
    rows = np.ascontiguousarray(rows, np.float64)
    first = rows[0].tobytes()
    return [rank for rank in range(1, len(rows)) if rows[rank].tobytes() != first]


def differing_mask(rows):
    """differing_ranks as a bool tensor, one per rank (inside a compiled step, where
    the verdict must stay a tensor): the same bitwise comparison with rank 0's row."""
    import tensorflow as tf
    bits = tf.bitcast(tf.cast(rows, tf.float64), tf.int64)
    return tf.reduce_any(tf.not_equal(bits, bits[:1]), axis=1)


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
            f"applies the same reduced gradients. The job stops because the ranks would "
            f"train different models. Fix: wrap the optimizer, load "
            f"weights on every rank or broadcast them from rank 0 after loading, then relaunch")


class RanksDiverged(RuntimeError):
    """Some rank's weights differ from rank 0's; every rank raises it at the same check."""

    def __init__(self, ranks, step: int, where: str = "a check"):
        self.ranks, self.step, self.where = list(ranks), step, where
        super().__init__(message(self.ranks, step, where))


def _has_peers(backend) -> bool:
    """More than one rank, reached by a collective: a one-process communicator has
    nobody to compare with, whatever the backend's info says (a test that re-forms a
    "ring" of two in one process)."""
    return backend.info.size > 1 and backend.comm.reaches_peers


def check(backend, variables, step: int, where: str):
    """Compares `variables` across ranks, eagerly; raises RanksDiverged on every rank
    if any rank's differ (all ranks hold the same gathered rows, so all decide alike).
    Returns the rows, or None without peers (one rank: no collective)."""
    if not _has_peers(backend):
        return None
    rows = gather(backend, _compiled_checksum(variables))
    ranks = differing_ranks(rows)
    if ranks:
        raise RanksDiverged(ranks, step, where)
    return rows


def epoch_end_due(step: int, epoch_steps: int | None, first: bool) -> bool:
    """Whether the epoch that ends at `step` (after `epoch_steps` steps) is compared:
    the first epoch end, then those whose epoch crossed a multiple of
    MIN_STEPS_BETWEEN_EPOCH_CHECKS; every epoch end when its length is unknown.

    A function of the position alone, never of a rank's own history: a rank that joined
    an elastic ring mid-run must decide as the others do, or it would enter the check's
    collective alone."""
    if first or not epoch_steps:
        return True
    every = MIN_STEPS_BETWEEN_EPOCH_CHECKS
    return step // every != (step - epoch_steps) // every
