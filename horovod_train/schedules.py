"""The learning-rate warmup formula, once, for the loop and for the Keras callbacks.

Linear scaling (Goyal et al.): with N ranks the global batch is N times larger, so the
rate is N times larger too, reached gradually, since a large rate at step 0 diverges.
"""


def warmup_rate(base, scaled, progress, minimum=min):
    """`base` at progress 0, rising linearly to `scaled` at progress 1, flat after.

    progress is the fraction of the warmup done (steps or epochs over the warmup
    length); `minimum` is min for Python numbers or keras.ops.minimum for tensors, so
    the compiled schedule and the Python figure for the logs share this one line."""
    return base + (scaled - base) * minimum(progress, 1.0)
