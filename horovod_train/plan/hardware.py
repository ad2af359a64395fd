"""GPU and interconnect tables, with the source of every number.

Rates are dense (no 2:4 sparsity) peak numbers from the vendor datasheets. Link
bandwidths are line rates per direction; the planner multiplies them by a stated
bus-bandwidth efficiency (what NCCL's allreduce reaches on that link, as `busbw` in
nccl-tests) and charges a per-ring-step latency. Those two constants are the only
non-datasheet numbers here; each has its reasoning next to it.
"""
from __future__ import annotations

import dataclasses

from horovod_train.plan.errors import plan_error, unknown_name
from launch import contract

# The trainer's precisions plus two planner-only spellings of fp32 math:
# - fp32: what the trainer's fp32 runs. TensorFlow enables TF32 by default
#   (tf.config.experimental.enable_tensor_float_32_execution is True), so on a GPU with
#   TF32 tensor cores its fp32 matmuls and convolutions run as TF32; planned so.
# - tf32: the same, said explicitly (no warning).
# - fp32_strict: TF32 turned off, FP32 on CUDA cores (see TF32_OFF for how).
PRECISIONS = contract.PRECISIONS[:1] + ("tf32", "fp32_strict") + contract.PRECISIONS[1:]

# How a program turns TF32 off, for the plan's fp32 warning and the docs.
TF32_OFF = ("tf.config.experimental.enable_tensor_float_32_execution(False) in the program, "
            "or NVIDIA_TF32_OVERRIDE=0 in the environment")

# Bytes of one stored activation element. Keras mixed policies compute in 16 bits
# and keep activations in 16 bits; the fp32 spellings keep fp32 tensors (TF32 only
# changes the tensor-core math, not the storage).
ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp32_strict": 4, "mixed_float16": 2,
                    "mixed_bfloat16": 2}

# GPU architectures, oldest first. TF32 tensor cores arrived with Ampere; every later
# architecture has them. This order is the one place the planner learns that.
ARCHITECTURES = ("pascal", "volta", "turing", "ampere", "ada", "hopper")
FIRST_TF32_ARCH = "ampere"

GIB = 2 ** 30
GB = 1e9


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    arch: str                # a key of ARCHITECTURES
    memory_gib: float        # what nvidia-smi reports as total, in GiB
    hbm_gbs: float           # device memory bandwidth, GB/s
    fp32_tflops: float       # FP32 on CUDA cores
    tf32_tflops: float | None    # TF32 tensor cores; None exactly when arch predates Ampere
    fp16_tflops: float       # FP16 (tensor cores from Volta on)
    bf16_tflops: float | None    # None: no bfloat16 hardware
    intra: str               # default intra-node link, a key of INTRA_LINKS
    source: str

    @property
    def has_tf32(self) -> bool:
        return ARCHITECTURES.index(self.arch) >= ARCHITECTURES.index(FIRST_TF32_ARCH)


@dataclasses.dataclass(frozen=True)
class Link:
    name: str
    gbs: float               # line rate per direction, GB/s (per GPU for intra, per port for networks)
    efficiency: float        # achieved allreduce bus bandwidth / line rate
    latency_us: float        # per ring step (one hop of one chunk)
    source: str

    @property
    def busbw(self) -> float:
        """Effective allreduce bus bandwidth in bytes/s."""
        return self.gbs * self.efficiency * GB


GPUS = {g.name: g for g in (
    # Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOPS FP32, 18.7 FP16, 732 GB/s HBM2.
    # The Horovod paper (arXiv:1802.05799) ran on servers of 4 Pascal GPUs; a
    # 4-GPU PCIe box is the usual such server, so this is the "p100" entry.
    Gpu("p100-16gb", "pascal", 16.0, 732, 9.3, None, 18.7, None, "pcie3",
        "NVIDIA Tesla P100 PCIe datasheet"),
    # Tesla P100 SXM2: 10.6 FP32, 21.2 FP16, NVLink 1.0 (4 links x 20 GB/s).
    Gpu("p100-sxm2-16gb", "pascal", 16.0, 732, 10.6, None, 21.2, None, "nvlink1",
        "NVIDIA Tesla P100 SXM2 datasheet"),
    # Tesla V100 SXM2: 15.7 FP32, 125 FP16 tensor, 900 GB/s HBM2, NVLink 2.0 (6 x 25 GB/s).
    # No bfloat16 and no TF32: TF falls back to FP32 math for tf32.
    Gpu("v100-16gb", "volta", 16.0, 900, 15.7, None, 125.0, None, "nvlink2",
        "NVIDIA V100 datasheet (SXM2)"),
    Gpu("v100-32gb", "volta", 32.0, 900, 15.7, None, 125.0, None, "nvlink2",
        "NVIDIA V100 datasheet (SXM2)"),
    # A100 SXM4: 19.5 FP32, 156 TF32, 312 FP16/BF16 dense; 1555 GB/s (40 GB),
    # 2039 GB/s (80 GB); NVLink 3.0, 12 links x 25 GB/s.
    Gpu("a100-40gb", "ampere", 40.0, 1555, 19.5, 156.0, 312.0, 312.0, "nvlink3",
        "NVIDIA A100 datasheet (SXM4 40GB)"),
    Gpu("a100-80gb", "ampere", 80.0, 2039, 19.5, 156.0, 312.0, 312.0, "nvlink3",
        "NVIDIA A100 datasheet (SXM4 80GB)"),
    # H100 SXM5: 67 FP32, 494.7 TF32, 989.4 FP16/BF16 dense (the datasheet's 989 /
    # 1979 figures are with sparsity); 3.35 TB/s HBM3; NVLink 4.0, 18 links x 25 GB/s.
    Gpu("h100-80gb", "hopper", 79.6, 3350, 67.0, 494.7, 989.4, 989.4, "nvlink4",
        "NVIDIA H100 datasheet (SXM5)"),
    # H200 SXM: H100 compute, 141 GB HBM3e at 4.8 TB/s.
    Gpu("h200-141gb", "hopper", 140.4, 4800, 67.0, 494.7, 989.4, 989.4, "nvlink4",
        "NVIDIA H200 datasheet (SXM)"),
    # L4 (Ada, PCIe): 30.3 FP32, 60 TF32, 121 FP16/BF16 dense (the datasheet's 120 /
    # 242 are with sparsity); 24 GB GDDR6 at 300 GB/s (nvidia-smi: 23034 MiB); PCIe 4.0
    # x16, no NVLink.
    Gpu("l4-24gb", "ada", 22.5, 300, 30.3, 60.0, 121.0, 121.0, "pcie4",
        "NVIDIA L4 datasheet"),
)}

# NCCL reaches ~230-240 GB/s allreduce busbw on a DGX A100 (nccl-tests, NVSwitch,
# 300 GB/s per direction per GPU): 0.78 of line rate. We use 0.78 for every NVLink
# generation. PCIe peer traffic crosses switches or the CPU root complex; NCCL
# reaches ~70% of the x16 rate. Per-step latency: NCCL's low-latency protocol
# needs ~1 us per hop over NVLink, ~2 us over PCIe.
_NVLINK_EFF, _PCIE_EFF = 0.78, 0.70
INTRA_LINKS = {link.name: link for link in (
    Link("nvlink1", 80.0, _NVLINK_EFF, 1.0, "P100: 4 NVLink 1.0 links x 20 GB/s per direction"),
    Link("nvlink2", 150.0, _NVLINK_EFF, 1.0, "V100: 6 NVLink 2.0 links x 25 GB/s per direction"),
    Link("nvlink3", 300.0, _NVLINK_EFF, 1.0, "A100: 12 NVLink 3.0 links x 25 GB/s per direction"),
    Link("nvlink4", 450.0, _NVLINK_EFF, 1.0, "H100/H200: 18 NVLink 4.0 links x 25 GB/s per direction"),
    Link("pcie3", 15.75, _PCIE_EFF, 2.0, "PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b"),
    Link("pcie4", 31.5, _PCIE_EFF, 2.0, "PCIe 4.0 x16: 16 GT/s x 16 lanes"),
    Link("pcie5", 63.0, _PCIE_EFF, 2.0, "PCIe 5.0 x16: 32 GT/s x 16 lanes"),
)}

# Line rates from the InfiniBand Trade Association roadmap (4x EDR 100, HDR 200,
# NDR 400 Gb/s) and IEEE 802.3 Ethernet rates. Efficiencies: NCCL over IB verbs
# reaches ~90% of line rate (8 x HDR DGX A100 nodes measure ~180 GB/s busbw of 200);
# RoCE needs PFC/ECN-lossless Ethernet and lands a little lower (0.85). NCCL's
# socket transport copies through the kernel: ~75% of a 10G link, less as links
# get faster (NCCL's docs advise more socket threads for 100G), hence 0.6 and 0.4.
# Latency per ring step: RDMA ~3-4 us including NCCL's proxy thread; kernel TCP
# ~30 us.
NETWORKS = {link.name: link for link in (
    Link("ib-edr", 12.5, 0.90, 3.0, "InfiniBand 4x EDR, 100 Gb/s"),
    Link("ib-hdr", 25.0, 0.90, 3.0, "InfiniBand 4x HDR, 200 Gb/s"),
    Link("ib-ndr", 50.0, 0.90, 3.0, "InfiniBand 4x NDR, 400 Gb/s"),
    Link("roce-25g", 3.125, 0.85, 4.0, "RoCE v2 over 25 GbE (the Horovod paper's network)"),
    Link("roce-100g", 12.5, 0.85, 4.0, "RoCE v2 over 100 GbE"),
    Link("roce-200g", 25.0, 0.85, 4.0, "RoCE v2 over 200 GbE"),
    Link("roce-400g", 50.0, 0.85, 4.0, "RoCE v2 over 400 GbE"),
    Link("tcp-10g", 1.25, 0.75, 30.0, "TCP over 10 GbE (NCCL socket transport)"),
    Link("tcp-25g", 3.125, 0.60, 30.0, "TCP over 25 GbE (NCCL socket transport)"),
    Link("tcp-100g", 12.5, 0.40, 30.0, "TCP over 100 GbE (NCCL socket transport)"),
)}


def get_gpu(name: str) -> Gpu:
    if name not in GPUS:
        raise unknown_name("--gpu", name, GPUS, "--gpu")
    return GPUS[name]


def get_network(name: str) -> Link:
    if name not in NETWORKS:
        raise unknown_name("--interconnect", name, NETWORKS, "--interconnect")
    return NETWORKS[name]


def get_intra(name: str) -> Link:
    if name not in INTRA_LINKS:
        raise unknown_name("--intra", name, INTRA_LINKS, "--intra")
    return INTRA_LINKS[name]


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise unknown_name("--precision", precision, PRECISIONS, "--precision")


def matmul_math(gpu: Gpu, precision: str) -> str:
    """The math TensorFlow runs matmuls/convolutions in: the one TF32 rule.

    fp32 and tf32 run as TF32 where the GPU has it (TF's default), as FP32 before
    Ampere; fp32_strict is FP32 everywhere."""
    check_precision(precision)
    if precision in ("fp32", "tf32"):
        return "tf32" if gpu.has_tf32 else "fp32"
    if precision == "fp32_strict":
        return "fp32"
    return precision


def tf32_warning(gpu: Gpu, precision: str) -> str | None:
    """The note a plan of plain fp32 carries on a TF32 GPU, else None."""
    if precision != "fp32" or not gpu.has_tf32:
        return None
    return (f"--precision fp32 on {gpu.name} ({gpu.arch}) is planned as TF32: TensorFlow runs "
            f"fp32 matmuls and convolutions on TF32 tensor cores there by default "
            f"(tf.config.experimental.enable_tensor_float_32_execution defaults to True), "
            f"{gpu.tf32_tflops:g} rather than {gpu.fp32_tflops:g} TFLOPS. For a run with TF32 "
            f"off ({TF32_OFF}) plan --precision fp32_strict")


def peak_flops(gpu: Gpu, precision: str) -> float:
    """Dense peak FLOP/s for the math that `precision` runs on `gpu`."""
    kind = matmul_math(gpu, precision)
    if kind == "fp32":
        return gpu.fp32_tflops * 1e12
    if kind == "tf32":
        return gpu.tf32_tflops * 1e12
    if precision == "mixed_float16":
        return gpu.fp16_tflops * 1e12
    if gpu.bf16_tflops is None:
        raise plan_error("--precision", precision,
                         f"a precision {gpu.name} supports (fp32, fp32_strict, mixed_float16)",
                         f"{gpu.name} has no bfloat16 hardware; pass --precision mixed_float16")
    return gpu.bf16_tflops * 1e12
