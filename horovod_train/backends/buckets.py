"""Which gradients travel together: the one bucketing rule of every backend.

Backprop produces gradients from the last layer to the first, so the list (in the
model's variable order) is walked backwards and cut into buckets of at least
`bucket_bytes`. Each bucket is one collective, issued in the compiled step as soon as
its gradients exist: the first buckets travel while the backward pass still computes
the early layers' gradients (TF's MultiWorkerMirroredStrategy packs by the same rule,
CommunicationOptions.bytes_per_pack; the mwms backend cuts the list here instead, since
its collectives do not go through the strategy).

TF-free: a pure function of byte sizes.
"""
from horovod_train.config import DEFAULT_BUCKET_MB


def buckets(sizes: list[int], bucket_bytes: int) -> list[list[int]]:
    """Indices of `sizes` in buckets, last index first; every bucket but the final one
    holds at least `bucket_bytes`. bucket_bytes <= 0: one bucket of everything (one
    grouped call after the backward pass)."""
    order = list(range(len(sizes) - 1, -1, -1))
    if bucket_bytes <= 0:
        return [order] if order else []
    out, current, filled = [], [], 0
    for i in order:
        current.append(i)
        filled += sizes[i]
        if filled >= bucket_bytes:
            out.append(current)
            current, filled = [], 0
    if current:
        out.append(current)
    return out


def mib_to_bytes(mib: float | None) -> int:
    """None (--allreduce_bucket_mb unset): the default size; a backend may choose
    otherwise once it knows its transport (HorovodBackend.setup)."""
    return int((DEFAULT_BUCKET_MB if mib is None else mib) * 1024 * 1024)


def describe(bucket_bytes: int) -> str:
    """For the backend's line in the resolved config."""
    if bucket_bytes <= 0:
        return "gradients in one grouped allreduce"
    return f"gradient buckets of {bucket_bytes / 2 ** 20:g} MiB"
