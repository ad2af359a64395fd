"""Memory and time per step for one configuration. Pure functions, no I/O.

Step time on N GPUs = compute (k micro-batches) + straggler wait + exposed allreduce
+ optimizer update (+ input wait, if a calibration measured one). Scaling efficiency
is the one-GPU step time at the same per-GPU work divided by that: the weak-scaling
definition NVIDIA and the Horovod paper report.
"""
from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

from horovod_train.plan.comm import CommResult, Fabric, allreduce_seconds, exposed_comm
from horovod_train.plan.hardware import ACTIVATION_BYTES, GIB, Gpu, peak_flops
from horovod_train.plan.models import ModelSpec


@dataclasses.dataclass(frozen=True)
class Assumptions:
    """Every constant the model does not read from a datasheet, with its reason."""
    # Large cuBLAS/cuDNN GEMMs and convolutions reach 70-80% of dense peak; we take
    # the low end because a training step mixes in smaller, less efficient shapes.
    matmul_efficiency: float = 0.70
    # STREAM-like kernels reach ~80% of HBM bandwidth.
    memory_efficiency: float = 0.80
    # Memory-bound traffic per stored activation element per training step: written
    # and read once in forward (2), then in backward read for the weight gradient and
    # again by BN/ReLU/LayerNorm backward (2), its gradient written and read by the
    # data- and weight-gradient kernels (3), plus normalisation's second pass (1).
    traffic_passes: float = 8.0
    # One GPU kernel launch plus framework dispatch per op; CUDA's own launch costs
    # ~3-5 us and TF's executor adds a few more.
    launch_us: float = 5.0
    # Synchronous steps wait for the slowest rank. Persistent device variability:
    # Sinha et al. (SC'22, arXiv:2208.11035) measured ~8% average performance spread
    # across same-SKU GPUs in clusters of thousands, i.e. sigma ~ 8% / 6.6 = 1.2%.
    device_sigma: float = 0.012
    # Per-step jitter of one rank's step time (host scheduling, input pipeline, GC):
    # 2.5% coefficient of variation, an assumption; it averages down as 1/sqrt(k)
    # over k accumulated micro-batches. --calibrate reads step_time_cv when present.
    step_sigma: float = 0.025
    # CUDA context + cuBLAS/cuDNN handles (~0.5 GiB) and convolution/GEMM workspace
    # (~0.5 GiB), plus 5% allocator fragmentation on top of the tensors.
    context_gib: float = 0.5
    workspace_gib: float = 0.5
    fragmentation: float = 0.05


# Horovod >= 0.21 defaults, what the trainer's --fusion_threshold_mb 0 and
# --cycle_time_ms 0 leave in place (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME).
HOROVOD_FUSION_MB = 128.0
HOROVOD_CYCLE_MS = 1.0


@dataclasses.dataclass(frozen=True)
class Job:
    model: ModelSpec
    precision: str
    micro_batch: float          # samples per GPU per forward/backward
    accum_steps: int = 1        # micro-batches per optimizer step (one allreduce)
    optimizer: str = "momentum"
    checkpointing: bool = False
    compression: str = "none"   # a key of WIRE_BYTES: fp16/bf16 halve the allreduce
    overlap: bool = False       # allreduce overlaps the backward pass
    fusion_bytes: float = HOROVOD_FUSION_MB * 2 ** 20
    cycle_s: float = HOROVOD_CYCLE_MS * 1e-3
    wakes_on_enqueue: bool = True  # our patched Horovod (comm.exposed_comm); stock: False
    shard_optimizer_state: bool = False  # --shard_optimizer_state (ZeRO stage 1)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Measured replacements for assumed numbers (see calibrate.py)."""
    compute_scale: float = 1.0           # measured / predicted compute time
    intra_busbw: float | None = None     # bytes/s
    node_net_bw: float | None = None     # bytes/s per node
    data_s_per_sample: float = 0.0       # exposed input wait per sample per GPU
    step_sigma: float | None = None
    source: str = ""
    notes: tuple[str, ...] = ()


OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "lamb": 2}

# Bytes per gradient element on the wire, for the trainer's --compression choices.
WIRE_BYTES = {"none": 4, "fp16": 2, "bf16": 2}


def gradient_bytes(model: ModelSpec, compression: str) -> float:
    return model.params * WIRE_BYTES[compression]


def checkpoint_factor(model: ModelSpec, enabled: bool) -> float:
    """Activation memory kept with gradient checkpointing every sqrt(L) layers:
    ~2/sqrt(L) of it (Chen et al., arXiv:1604.06174), for one extra forward."""
    return min(1.0, 2.0 / math.sqrt(model.layers)) if enabled else 1.0


def _recompute(job: Job) -> float:
    return 4.0 / 3.0 if job.checkpointing else 1.0


@dataclasses.dataclass(frozen=True)
class Memory:
    params: float
    gradients: float
    optimizer: float
    activations: float
    workspace: float
    capacity: float

    @property
    def total(self) -> float:
        return self.params + self.gradients + self.optimizer + self.activations + self.workspace

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def over_by(self) -> float:
        return max(0.0, self.total - self.capacity)

    def terms(self) -> dict[str, float]:
        return {"parameters": self.params, "gradients": self.gradients,
                "optimizer state": self.optimizer, "activations": self.activations,
                "workspace": self.workspace}

    def largest_term(self) -> str:
        terms = self.terms()
        return max(terms, key=terms.get)


def memory(job: Job, gpu: Gpu, world: int, a: Assumptions = Assumptions()) -> Memory:
    p = job.model.params
    mixed = job.precision.startswith("mixed")
    # Keras mixed policies keep float32 variables and cast 16-bit copies per use;
    # the copies live until backward has used them.
    params = p * (4 + (2 if mixed else 0))
    grads = p * 4 * (2 if job.accum_steps > 1 else 1)   # + accumulator
    opt = p * 4 * OPTIMIZER_SLOTS.get(job.optimizer, 2)
    if job.shard_optimizer_state and world > 1:
        # 1/N of the slots, plus the rank's float32 copy of its shard of the parameters
        # (optimizer_shards.py); the padding (< N elements per bucket) is negligible.
        opt = (opt + p * 4) / world
    acts = math.ceil(job.micro_batch) * activation_bytes_per_sample(job)
    fusion = min(job.fusion_bytes, p * 4) if world > 1 else 0.0
    work = ((a.context_gib + a.workspace_gib) * GIB + fusion
            + a.fragmentation * (params + grads + opt + acts))
    return Memory(params, grads, opt, acts, work, gpu.memory_gib * GIB)


def activation_bytes_per_sample(job: Job) -> float:
    """Stored activations of one sample; checkpointing keeps ~2/sqrt(L) of the
    16/32-bit part (the float32 logits stay)."""
    m = job.model
    return (m.act_elems_per_sample * ACTIVATION_BYTES[job.precision]
            * checkpoint_factor(m, job.checkpointing) + m.fp32_act_elems_per_sample * 4)


@dataclasses.dataclass(frozen=True)
class Compute:
    micro_s: float        # one micro-batch forward + backward
    backward_s: float     # backward part of the last micro-batch (overlap window)
    update_s: float       # accumulation adds + optimizer update, per optimizer step
    mfu: float            # model FLOPs / (time x peak)


def compute(job: Job, gpu: Gpu, a: Assumptions = Assumptions(),
            calib: Calibration = Calibration()) -> Compute:
    """Roofline-style sum: matmul FLOPs at a fraction of tensor peak, plus the
    memory-bound elementwise traffic (BN, activations, softmax) at a fraction of HBM
    bandwidth, plus kernel launches. Summed, not max'ed: the two kinds of kernels run
    one after the other."""
    m, r = job.model, _recompute(job)
    peak = peak_flops(gpu, job.precision)
    hbm = gpu.hbm_gbs * 1e9 * a.memory_efficiency
    # Traffic scales with all stored bytes, including recomputed ones.
    traffic = (m.act_elems_per_sample * ACTIVATION_BYTES[job.precision]
               + m.fp32_act_elems_per_sample * 4) * a.traffic_passes
    per_sample = m.flops_per_sample * r / (peak * a.matmul_efficiency) + traffic * r / hbm
    micro = (job.micro_batch * per_sample + m.ops_per_step * a.launch_us * 1e-6) * calib.compute_scale
    backward = micro * (1 - 1 / (3 * r))
    slots = OPTIMIZER_SLOTS.get(job.optimizer, 2)
    # Update reads w, g and the slots and writes w and the slots; accumulation reads
    # and writes the accumulator per extra micro-batch; mixed precision casts the
    # float32 weights to 16 bits per micro-batch.
    update_bytes = m.params * (4 * (3 + 2 * slots) + 12 * (job.accum_steps - 1)
                               + (6 * job.accum_steps if job.precision.startswith("mixed") else 0))
    update = update_bytes / hbm * calib.compute_scale
    mfu = job.micro_batch * m.flops_per_sample / (micro * peak) if micro > 0 else 0.0
    return Compute(micro, backward, update, mfu)


def expected_max_z(n: int) -> float:
    """E[max of n standard normals], Blom's approximation; 0 for one rank."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_fraction(world: int, accum_steps: int, a: Assumptions,
                       calib: Calibration = Calibration()) -> float:
    step_sigma = a.step_sigma if calib.step_sigma is None else calib.step_sigma
    sigma = math.sqrt(a.device_sigma ** 2 + step_sigma ** 2 / max(1, accum_steps))
    return sigma * expected_max_z(world)


@dataclasses.dataclass(frozen=True)
class Prediction:
    world: int
    memory: Memory
    compute: Compute
    comm: CommResult
    compute_s: float       # k micro-batches
    straggler_s: float
    data_s: float
    step_s: float
    single_gpu_step_s: float
    samples_per_step: float

    @property
    def throughput(self) -> float:
        return self.samples_per_step / self.step_s

    @property
    def efficiency(self) -> float:
        return self.single_gpu_step_s / self.step_s


def sharded_update(job: Job, c: Compute, window: float, grad_bytes: float, fabric,
                   gpu: Gpu, a: Assumptions, calib: Calibration) -> tuple[Compute, CommResult]:
    """--shard_optimizer_state: the same bytes on the wire as one allreduce, split in two.
    The reduce-scatter (half a ring allreduce's time) overlaps backprop as the allreduce
    did; the allgather (the other half) waits for the update, so it is never hidden,
    and one more small allreduce (the finite verdict) adds its latency. The update
    touches 1/N of the slots, plus a pass to read the shard and one to write the
    gathered parameters."""
    world = fabric.world
    hbm = gpu.hbm_gbs * 1e9 * a.memory_efficiency
    update = c.update_s / world + 2 * job.model.params * 4 / hbm * calib.compute_scale
    # A reduce-scatter of S moves what an allreduce of S/2 does: (n-1)/n * S per rank.
    scatter = exposed_comm(grad_bytes / 2, fabric, job.fusion_bytes / 2, job.cycle_s, window,
                           wakes_on_enqueue=job.wakes_on_enqueue)
    after = allreduce_seconds(grad_bytes, fabric)[0] / 2 + allreduce_seconds(8, fabric)[0]
    comm = dataclasses.replace(scatter, exposed_s=scatter.exposed_s + after,
                               busy_s=scatter.busy_s + after, calls=scatter.calls * 2 + 1)
    return dataclasses.replace(c, update_s=update), comm


def predict(job: Job, gpu: Gpu, fabric: Fabric, a: Assumptions = Assumptions(),
            calib: Calibration = Calibration()) -> Prediction:
    world = fabric.world
    if calib.intra_busbw or calib.node_net_bw:
        fabric = dataclasses.replace(fabric, intra_busbw=calib.intra_busbw or fabric.intra_busbw,
                                     node_net_bw=calib.node_net_bw or fabric.node_net_bw)
    c = compute(job, gpu, a, calib)
    k = job.accum_steps
    compute_s = k * c.micro_s
    data_s = calib.data_s_per_sample * job.micro_batch * k
    grad_bytes = gradient_bytes(job.model, job.compression)
    window = c.backward_s if job.overlap else 0.0
    comm = exposed_comm(grad_bytes, fabric, job.fusion_bytes, job.cycle_s, window,
                        wakes_on_enqueue=job.wakes_on_enqueue)
    single = compute_s + c.update_s + data_s  # one GPU: the whole update, unsharded
    if job.shard_optimizer_state and world > 1:
        c, comm = sharded_update(job, c, window, grad_bytes, fabric, gpu, a, calib)
    straggle = compute_s * straggler_fraction(world, k, a, calib)
    step = compute_s + c.update_s + data_s + straggle + comm.exposed_s
    return Prediction(world, memory(job, gpu, world, a), c, comm, compute_s, straggle,
                      data_s, step, single, job.micro_batch * k * world)
