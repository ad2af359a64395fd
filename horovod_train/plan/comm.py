"""Allreduce cost: ring and hierarchical ring, fusion buckets, overlap with backprop.

A ring allreduce of S bytes over n ranks moves 2(n-1)/n * S bytes through each rank's
slowest link and takes 2(n-1) latency-bound steps (Patarasuk & Yuan 2009; the Horovod
paper, arXiv:1802.05799, sec. 3). NCCL reports exactly that bandwidth as `busbw`, so
time = 2(n-1)/n * S / busbw + 2(n-1) * alpha.

Across nodes two shapes matter, and NCCL / Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE
pick whichever is faster, so we take the minimum:
- flat ring over all N GPUs: bandwidth set by the slowest hop, latency 2(N-1) steps;
- hierarchical: reduce-scatter inside the node (NVLink/PCIe), g parallel inter-node
  rings on S/g each (they share the node's NICs), allgather inside the node: more
  bandwidth terms in sequence, but only 2(g-1) + 2(n-1) latency steps.
A flat ring crosses each node's NICs once per direction, so both shapes see the node's
aggregate NIC bandwidth, not one NIC per GPU.
"""
from __future__ import annotations

import dataclasses
import math

from horovod_train.config import DEFAULT_BUCKET_MB  # TF-free: the trainer's one constant
from horovod_train.plan.hardware import Link


@dataclasses.dataclass(frozen=True)
class Fabric:
    """What one allreduce crosses: g GPUs per node on `intra`, n nodes on `network`."""
    gpus_per_node: int
    nodes: int
    intra: Link
    network: Link | None
    nics_per_node: int = 1
    intra_busbw: float | None = None     # bytes/s; set by --calibrate, else intra.busbw
    node_net_bw: float | None = None     # bytes/s per node; set by --calibrate

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes

    def intra_bw(self) -> float:
        return self.intra_busbw or self.intra.busbw

    def net_bw(self) -> float:
        if self.node_net_bw:
            return self.node_net_bw
        return self.nics_per_node * self.network.busbw


def _ring(n: int, nbytes: float, bw: float, alpha_s: float) -> float:
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha_s


def allreduce_seconds(nbytes: float, fabric: Fabric) -> tuple[float, str]:
    """Time of one allreduce of `nbytes` and the algorithm that achieves it."""
    g, n = fabric.gpus_per_node, fabric.nodes
    a_intra = fabric.intra.latency_us * 1e-6
    if n <= 1:
        return _ring(g, nbytes, fabric.intra_bw(), a_intra), "ring (intra-node)"
    a_net = fabric.network.latency_us * 1e-6
    flat_bw = fabric.net_bw() if g == 1 else min(fabric.intra_bw(), fabric.net_bw())
    flat = _ring(g * n, nbytes, flat_bw, max(a_intra, a_net))
    if g == 1:
        return flat, "ring (inter-node)"
    hier = (_ring(g, nbytes, fabric.intra_bw(), a_intra)
            + _ring(n, nbytes / g, fabric.net_bw() / g, a_net))
    return (flat, "flat ring") if flat <= hier else (hier, "hierarchical ring")


# Backprop hands gradients to Horovod in pieces of the trainer's default gradient bucket
# (--allreduce_bucket_mb): the unit a cycle can send as soon as it is ready.
PIECE_BYTES = DEFAULT_BUCKET_MB * 2 ** 20


@dataclasses.dataclass(frozen=True)
class CommResult:
    exposed_s: float        # communication time not hidden behind backprop
    busy_s: float           # total time the allreduce engine was busy
    calls: int              # allreduce calls per step (fused buckets)
    algorithm: str


def exposed_comm(grad_bytes: float, fabric: Fabric, fusion_bytes: float, cycle_s: float,
                 overlap_window_s: float, piece_bytes: float = PIECE_BYTES,
                 wakes_on_enqueue: bool = True) -> CommResult:
    """Exposed allreduce time per optimizer step.

    Without overlap (overlap_window_s == 0: one grouped allreduce after the backward
    pass, as horovod_train's step does with --allreduce_bucket_mb 0) the fused buffers
    run back to back. With overlap (the trainer's gradient buckets, Horovod's
    DistributedOptimizer) backprop submits gradients in pieces of `piece_bytes` at a
    steady rate, and Horovod's background loop sends them: see _simulate_overlap.

    The one place the planner's model depends on the Horovod build (wakes_on_enqueue,
    launch/horovod_build.py): our patched Horovod starts a cycle the moment a tensor is
    submitted to an idle loop, or at once after a cycle that left tensors pending
    (scripts/horovod-patches, wake-on-enqueue), so no cycle time is waited out. Stock
    Horovod starts a cycle every cycle_s and only then looks at what was submitted: a
    tensor waits for the next cycle's start, half a cycle on average.
    """
    if fabric.world <= 1 or grad_bytes <= 0:
        return CommResult(0.0, 0.0, 0, "none")
    fusion = fusion_bytes if fusion_bytes > 0 else grad_bytes
    algorithm = allreduce_seconds(grad_bytes, fabric)[1]
    cycle = 0.0 if wakes_on_enqueue else max(0.0, cycle_s)
    if overlap_window_s <= 0:
        busy, calls = _send(grad_bytes, fabric, fusion)
        return CommResult(busy + cycle / 2, busy, calls, algorithm)
    return _simulate_overlap(grad_bytes, fabric, fusion, overlap_window_s, piece_bytes,
                             algorithm, cycle)


def _send(nbytes: float, fabric: Fabric, fusion: float) -> tuple[float, int]:
    """Seconds and calls to send `nbytes` as fused buffers of at most `fusion` bytes,
    one after another (Horovod performs a cycle's fused responses sequentially)."""
    full, rest = divmod(nbytes, fusion)
    seconds = full * allreduce_seconds(fusion, fabric)[0]
    if rest > nbytes * 1e-12:
        seconds += allreduce_seconds(rest, fabric)[0]
    return seconds, int(full) + (rest > nbytes * 1e-12)


def _next_start(t_free: float, submitted: float, last_start: float, cycle: float) -> float:
    """When a cycle that finds the next piece starts: with cycle 0 (a loop woken by the
    submission) at once; else on the loop's grid of cycle starts (stock Horovod sleeps
    until cycle has passed since the last start, not at all after a longer cycle)."""
    if cycle <= 0:
        return max(t_free, submitted)
    grid = max(t_free, last_start + cycle)
    return grid + max(0, math.ceil((submitted - grid) / cycle - 1e-9)) * cycle


def _simulate_overlap(total: float, fabric: Fabric, fusion: float, window: float,
                      piece_bytes: float, algorithm: str, cycle: float = 0.0) -> CommResult:
    # Backprop submits `pieces` equal pieces, piece i at (i + 1) * gap (the last one as
    # backprop ends). A cycle (_next_start) sends every piece submitted by its start,
    # fused up to the threshold, back to back. A stock loop runs on a grid of its own,
    # half a cycle out of phase with backprop on average.
    pieces = max(1, math.ceil(total / piece_bytes - 1e-9))
    size, gap = total / pieces, window / pieces
    t = busy = 0.0
    done = calls = 0
    last_start = -cycle / 2
    while done < pieces:
        t = last_start = _next_start(t, (done + 1) * gap, last_start, cycle)
        ready = max(done + 1, min(pieces, int(t / gap + 1e-9)))
        seconds, n = _send((ready - done) * size, fabric, fusion)
        t, busy, calls, done = t + seconds, busy + seconds, calls + n, ready
    return CommResult(max(0.0, t - window), busy, calls, algorithm)
