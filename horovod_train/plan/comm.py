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


@dataclasses.dataclass(frozen=True)
class CommResult:
    exposed_s: float        # communication time not hidden behind backprop
    busy_s: float           # total time the allreduce engine was busy
    calls: int              # allreduce calls per step (fused buckets)
    algorithm: str


def exposed_comm(grad_bytes: float, fabric: Fabric, fusion_bytes: float, cycle_s: float,
                 overlap_window_s: float) -> CommResult:
    """Exposed allreduce time per optimizer step.

    Without overlap (overlap_window_s == 0: one grouped allreduce after the backward
    pass, as horovod_train's step does) the buckets run back to back. With overlap
    (Horovod's DistributedOptimizer / per-tensor allreduce) gradients are assumed to
    become ready uniformly during the backward pass; every cycle Horovod's background
    thread fuses whatever is ready, up to the fusion threshold, into one allreduce
    (Tensor Fusion, horovod docs/tensor-fusion.rst). We simulate that loop.
    """
    if fabric.world <= 1 or grad_bytes <= 0:
        return CommResult(0.0, 0.0, 0, "none")
    fusion = fusion_bytes if fusion_bytes > 0 else grad_bytes
    algorithm = allreduce_seconds(grad_bytes, fabric)[1]
    if overlap_window_s <= 0:
        full, rest = divmod(grad_bytes, fusion)
        busy = full * allreduce_seconds(fusion, fabric)[0]
        if rest > 0:
            busy += allreduce_seconds(rest, fabric)[0]
        calls = int(full) + (rest > 0)
        # The last tensor waits on average half a cycle for the background thread.
        return CommResult(busy + cycle_s / 2, busy, calls, algorithm)
    return _simulate_overlap(grad_bytes, fabric, fusion, cycle_s, overlap_window_s, algorithm)


def _simulate_overlap(total: float, fabric: Fabric, fusion: float, cycle_s: float,
                      window: float, algorithm: str) -> CommResult:
    # Coarser cycles for very long backward passes keep the loop under ~4000 turns;
    # the result changes by less than one cycle.
    cycle = max(cycle_s, window / 4000, 1e-6)
    rate = total / window
    t = sent = busy = 0.0
    calls = 0
    while sent < total * (1 - 1e-12):
        t = math.ceil(t / cycle - 1e-9) * cycle          # next tick of the background loop
        ready = min(total, rate * t) - sent
        if ready <= total * 1e-12:
            t += cycle
            continue
        chunk = min(ready, fusion)
        seconds = allreduce_seconds(chunk, fabric)[0]
        t += seconds
        busy += seconds
        sent += chunk
        calls += 1
    return CommResult(max(0.0, t - window), busy, calls, algorithm)
