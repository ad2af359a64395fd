"""Which rank owns which parameters' optimizer state (--shard_optimizer_state, ZeRO
stage 1): a pure function of the variables' shapes, the world size and a bucket size.

The trainable variables are cut into buckets by the gradient buckets' own rule
(backends/buckets.py: last layers first, each at least `bucket_bytes`); a bucket is its
variables flattened and laid end to end, padded with zeros to a multiple of the world
size, and rank r owns the r-th of its N equal slices. Gradients travel as one
reduce-scatter per bucket (each rank receives its slice, reduced), each rank updates its
slices, and one allgather per bucket brings every rank the updated parameters: the ring
moves the bytes of one allreduce, (N-1)/N of the bucket each way.

A rank's shard is its slices of every bucket, in bucket order, end to end: its optimizer
keeps state for those elements only. Padding is at most N-1 elements per bucket.

TF-free: every rank computes the same layout from the same shapes.
"""
import dataclasses
import math

from horovod_train.backends import buckets as bucket_rule


@dataclasses.dataclass(frozen=True)
class Bucket:
    members: tuple  # variable indices, in the order they are laid end to end
    offsets: tuple  # where each member starts in the bucket
    sizes: tuple  # each member's element count
    padded: int  # the bucket's elements with padding: a multiple of the world size
    slice: int  # one rank's elements of it: padded / world size

    @property
    def used(self) -> int:
        return sum(self.sizes)


@dataclasses.dataclass(frozen=True)
class Segment:
    """Elements [start, stop) of variable `variable` (flattened) sit at `at` in a shard."""
    variable: int
    start: int
    stop: int
    at: int


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    world_size: int
    buckets: tuple  # of Bucket
    elements: int  # the parameters' elements (unpadded)

    @property
    def shard_elements(self) -> int:
        """Elements of one rank's shard (every rank's is the same size)."""
        return sum(b.slice for b in self.buckets)

    @property
    def padding(self) -> int:
        """Zero elements added so each bucket splits evenly (over all ranks)."""
        return sum(b.padded - b.used for b in self.buckets)

    def shard_starts(self) -> list[int]:
        """Where each bucket's slice starts in a rank's shard."""
        starts, at = [], 0
        for b in self.buckets:
            starts.append(at)
            at += b.slice
        return starts

    def segments(self, rank: int) -> list[Segment]:
        """The parameter elements rank `rank` owns, in shard order (padding left out:
        the positions between segments, and after the last, are zeros)."""
        out = []
        for bucket, base in zip(self.buckets, self.shard_starts()):
            lo, hi = rank * bucket.slice, (rank + 1) * bucket.slice
            for var, offset, size in zip(bucket.members, bucket.offsets, bucket.sizes):
                start, stop = max(lo, offset), min(hi, offset + size)
                if start < stop:
                    out.append(Segment(var, start - offset, stop - offset, base + start - lo))
        return out


def layout(shapes, world_size: int, bucket_bytes: int, itemsize: int = 4) -> ShardLayout:
    """The layout of variables of these shapes (one dtype of `itemsize` bytes) over
    `world_size` ranks; bucket_bytes <= 0: one bucket of everything."""
    if world_size < 1:
        raise ValueError(f"world_size {world_size}: expected 1 or more")
    sizes = [math.prod(shape) for shape in shapes]
    out = []
    for members in bucket_rule.buckets([s * itemsize for s in sizes], bucket_bytes):
        members = [i for i in members if sizes[i]]  # an empty variable has no elements
        if not members:
            continue
        offsets = [sum(sizes[j] for j in members[:k]) for k in range(len(members))]
        used = sum(sizes[i] for i in members)
        padded = -(-used // world_size) * world_size
        out.append(Bucket(tuple(members), tuple(offsets), tuple(sizes[i] for i in members),
                          padded, padded // world_size))
    return ShardLayout(world_size, tuple(out), sum(sizes))


def state_bytes(layout_: ShardLayout, slots: int, itemsize: int = 4) -> dict:
    """Optimizer-state bytes per rank, sharded and not, for `slots` per-element slots
    (Adam 2, SGD with momentum 1): what the config line and the summary report."""
    return {"optimizer_state_bytes_per_rank": slots * layout_.shard_elements * itemsize,
            "optimizer_state_bytes_unsharded": slots * layout_.elements * itemsize,
            "optimizer_state_padding_elements": layout_.padding,
            "shard_parameter_bytes_per_rank": layout_.shard_elements * itemsize}
