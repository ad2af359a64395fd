"""`python -m horovod_train plan ...`: flags -> PlanRequest -> tables / JSON / PNG.

main(argv) returns 0 when a configuration fits (as planned, or with the levers the
recommendation names), 1 when none does (the report says why), and 2 on bad input
(one line on stderr: received / expected / fix).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from horovod_train.config import DEFAULT_BUCKET_MB  # TF-free: the trainer's one constant
from horovod_train import console
from horovod_train.plan import hardware
from horovod_train.plan.calibrate import calibrate
from horovod_train.plan.cost import (HOROVOD_CYCLE_MS, HOROVOD_FUSION_MB, OPTIMIZER_SLOTS,
                                     WIRE_BYTES, Assumptions, Calibration)
from horovod_train.plan.errors import PlanError, plan_error
from horovod_train.plan.models import TRAINER_MODELS, get_model, trainer_verdict
from horovod_train.plan.recommend import (HOROVOD_BUILDS, OBJECTIVES, PlanRequest,
                                           evaluate_all, recommend)
from horovod_train.plan import plot, report
from launch import horovod_build
from launch import usage
from launch.argv import normalize_flag_names


# The planner's old names still accepted for the trainer's (same meaning), so commands
# written for the planner keep working; --help and the docs show the trainer's name alone.
ALIASES = {"--batch_per_gpu": "--batch_size"}


class _Parser(usage.Parser):             # one line, raised instead of sys.exit
    error_type = PlanError


PROG = "horovod_train plan"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog,
                description="Predict memory, step time, scaling efficiency, hours, GPU-hours "
                            "and cost of data-parallel training before renting the cluster.")
    p.add_argument("--model", required=True, help="a trainer model (" + ", ".join(
                   sorted(TRAINER_MODELS)) + "), bert-base, bert-large, "
                   "gpt2-small/medium/large/xl, or gpt:layers=L,hidden=H,heads=A[,seq=S,vocab=V]")
    p.add_argument("--seq_len", type=int, help="sequence length (transformers)")
    batch = p.add_mutually_exclusive_group(required=True)
    batch.add_argument("--global_batch", type=int, help="samples per optimizer step, all GPUs")
    batch.add_argument("--batch_size", type=int,
                       help="micro-batch per GPU, the trainer's per-replica --batch_size "
                            "(weak scaling)")
    for old, new in ALIASES.items():    # same group: both at once is refused by argparse
        batch.add_argument(old, dest=new[2:], type=int, help=argparse.SUPPRESS)
    p.add_argument("--gpu", required=True, help=", ".join(sorted(hardware.GPUS)))
    p.add_argument("--gpus_per_node", type=int, default=8)
    p.add_argument("--interconnect", help="inter-node network: " + ", ".join(hardware.NETWORKS))
    p.add_argument("--nics_per_node", type=int, default=1,
                   help="network ports per node (DGX A100/H100: 8, one per GPU)")
    p.add_argument("--intra", default="auto",
                   help="intra-node link: auto (the GPU's) or " + ", ".join(hardware.INTRA_LINKS))
    p.add_argument("--nodes", default="1", help="comma-separated node counts, e.g. 1,2,4,8")
    p.add_argument("--precision", default="fp32", help=", ".join(hardware.PRECISIONS) + "; fp32 "
                   "runs as TF32 on Ampere and newer, as TensorFlow does by default; "
                   "fp32_strict: TF32 turned off")
    p.add_argument("--optimizer", help="sgd, momentum, adam, adamw, lamb (default: the model's)")
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--shard_optimizer_state", action="store_true",
                   help="the trainer's ZeRO stage 1: 1/N of the optimizer state per GPU")
    p.add_argument("--grad_accum_steps", type=int, default=1)
    p.add_argument("--compression", default="none",
                   help="gradients on the wire, as the trainer's: " + ", ".join(WIRE_BYTES))
    # The trainer's flag, with the trainer's default where the planner's clusters run
    # (GPU hosts: backends/horovod.unset_bucket_mb): buckets of DEFAULT_BUCKET_MB reduced
    # while backprop runs, so the planner overlaps unless told 0.
    p.add_argument("--allreduce_bucket_mb", type=float, default=DEFAULT_BUCKET_MB,
                   metavar="MIB",
                   help=f"the trainer's flag and its default on GPU hosts "
                        f"({DEFAULT_BUCKET_MB:g}): > 0 plans "
                        "the allreduce overlapping backprop, as the trainer's gradient buckets "
                        "do; 0 plans one grouped allreduce after backprop (the trainer's 0), "
                        "the most exposed comm")
    p.add_argument("--overlap", action="store_true",
                   help="allreduce overlaps backprop (also Horovod's DistributedOptimizer): "
                        "the default since --allreduce_bucket_mb defaults to "
                        f"{DEFAULT_BUCKET_MB:g}; kept for older commands, refused with "
                        "--allreduce_bucket_mb 0")
    # The trainer's flags, names and meaning: MiB and ms, 0 = Horovod's default.
    p.add_argument("--fusion_threshold_mb", type=float, default=0.0,
                   help=f"HOROVOD_FUSION_THRESHOLD in MiB; 0 = Horovod's {HOROVOD_FUSION_MB:g}")
    p.add_argument("--cycle_time_ms", type=float, default=0.0,
                   help=f"HOROVOD_CYCLE_TIME in ms; 0 = Horovod's {HOROVOD_CYCLE_MS:g}")
    p.add_argument("--horovod_build", default="auto", choices=("auto",) + tuple(HOROVOD_BUILDS),
                   help="the Horovod the cluster runs: patched (scripts/setup.sh's build: a "
                        "submitted tensor wakes Horovod's loop) or stock (it waits for the next "
                        "cycle); auto: the one installed here, stock when none is")
    p.add_argument("--objective", default="fastest", choices=OBJECTIVES,
                   help="fastest: fewest hours (with --target_hours: fewest GPUs within it); "
                        "cheapest: fewest GPU-hours; both at or above --target_efficiency")
    p.add_argument("--price_per_gpu_hour", type=float, metavar="USD",
                   help="adds the cost of each configuration (GPU-hours x price)")
    p.add_argument("--target_hours", type=float, help="recommend the fewest GPUs within this")
    p.add_argument("--target_efficiency", type=float, default=0.8,
                   help="0-1, default 0.8: the scaling-efficiency floor of the recommendation")
    p.add_argument("--epochs", type=float, help="training length, with --dataset_size")
    p.add_argument("--dataset_size", type=int, help="samples per epoch (default: the model's)")
    p.add_argument("--train_samples", type=float, help="total samples to train on")
    p.add_argument("--calibrate", metavar="RUN_DIR", help="a run directory with summary.json")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--plot", metavar="FILE.png",
                   help="write efficiency and hours (and cost) vs GPU count")
    return p


def _positive(flag: str, value, allow_none=True):
    if value is None and allow_none:
        return
    if value is None or not value > 0 or not math.isfinite(value):
        raise plan_error(flag, value, "a finite positive number", f"pass {flag} N with N > 0")


def _horovod_knob(flag: str, value: float, default: float, example: int) -> float:
    """The trainer's rule: 0 leaves Horovod's default, else a finite positive value."""
    if not (value >= 0 and math.isfinite(value)):
        raise plan_error(flag, value, "0 (Horovod's default) or a finite positive number",
                         f"pass {flag} 0, or e.g. {flag} {example}")
    return value or default


def _overlap(bucket_mb: float, overlap: bool) -> bool:
    """The trainer's --allreduce_bucket_mb (default DEFAULT_BUCKET_MB) selects the overlap
    model; the size itself is not modelled (comm.py takes the gradients as submitted in
    pieces of the default size). --overlap says the same as any size > 0."""
    if not (bucket_mb >= 0 and math.isfinite(bucket_mb)):
        raise plan_error("--allreduce_bucket_mb", bucket_mb, "0 (one grouped allreduce after "
                         "backprop) or a finite positive number of MiB",
                         f"pass --allreduce_bucket_mb {DEFAULT_BUCKET_MB:g} (the trainer's "
                         "default), or 0")
    if bucket_mb == 0 and overlap:
        raise plan_error("--allreduce_bucket_mb", "0 with --overlap", "one of them: 0 is one "
                         "grouped allreduce after backprop, which does not overlap",
                         "drop --overlap to plan no overlap, or drop --allreduce_bucket_mb 0 "
                         f"(the default, {DEFAULT_BUCKET_MB:g}, overlaps)")
    return bucket_mb > 0


def _horovod_build(choice: str) -> str:
    """auto: what the Horovod installed here does (launch/horovod_build.py); with none
    installed, stock, which is what `pip install horovod` gives."""
    if choice != "auto":
        return choice
    return "patched" if horovod_build.detect().wakes_on_enqueue else "stock"


def _nodes(text: str) -> tuple[int, ...]:
    try:
        nodes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        nodes = ()
    if not nodes or min(nodes) < 1:
        raise plan_error("--nodes", text, "comma-separated positive integers",
                         "e.g. --nodes 1,2,4,8")
    return tuple(sorted(set(nodes)))


def length_source(args, model) -> str:
    """Which flag set the training length, said in the plan (--train_samples wins)."""
    if args.train_samples is not None:
        ignored = (f"; --epochs {args.epochs:g} ignored: pass one of them"
                   if args.epochs is not None else "")
        return f"length: --train_samples {args.train_samples:,.0f} samples{ignored}"
    if args.epochs is None:
        return "length: none given (--epochs or --train_samples)"
    size = args.dataset_size or model.dataset_size
    whose = "--dataset_size" if args.dataset_size else "the model's dataset"
    return (f"length: --epochs {args.epochs:g} x {size:,} samples ({whose}) = "
            f"{args.epochs * size:,.0f} samples")


def _train_samples(args, model) -> float | None:
    if args.train_samples is not None:
        return args.train_samples
    if args.epochs is None:
        if args.target_hours is not None:
            raise plan_error("--target_hours", args.target_hours, "a training length too",
                             "add --epochs E (and --dataset_size N) or --train_samples N")
        return None
    size = args.dataset_size or model.dataset_size
    if size is None:
        raise plan_error("--epochs", args.epochs, f"--dataset_size for {model.name}",
                         f"add --dataset_size N (samples per epoch) or use --train_samples")
    return args.epochs * size


def request_from_args(args) -> PlanRequest:
    for flag in ("seq_len", "global_batch", "batch_size", "target_hours", "epochs",
                 "dataset_size", "train_samples", "price_per_gpu_hour"):
        _positive("--" + flag, getattr(args, flag))
    for flag in ("gpus_per_node", "nics_per_node", "grad_accum_steps"):
        _positive("--" + flag, getattr(args, flag), allow_none=False)
    fusion_mb = _horovod_knob("--fusion_threshold_mb", args.fusion_threshold_mb,
                              HOROVOD_FUSION_MB, 64)
    cycle_ms = _horovod_knob("--cycle_time_ms", args.cycle_time_ms, HOROVOD_CYCLE_MS, 5)
    overlap = _overlap(args.allreduce_bucket_mb, args.overlap)
    if not 0 < args.target_efficiency <= 1:
        raise plan_error("--target_efficiency", args.target_efficiency, "a fraction in (0, 1]",
                         "pass 0.8 for 80%")
    if args.compression not in WIRE_BYTES:
        raise plan_error("--compression", args.compression, ", ".join(WIRE_BYTES),
                         "pass --compression fp16")
    model = get_model(args.model, args.seq_len)
    gpu = hardware.get_gpu(args.gpu)
    hardware.check_precision(args.precision)
    hardware.peak_flops(gpu, args.precision)          # rejects bf16 on pre-Ampere now
    nodes = _nodes(args.nodes)
    network = hardware.get_network(args.interconnect) if args.interconnect else None
    if network is None and max(nodes) > 1:
        raise plan_error("--interconnect", f"--nodes {args.nodes} and no --interconnect",
                         f"a network for {max(nodes)} nodes",
                         "pass --interconnect " + "|".join(hardware.NETWORKS))
    optimizer = args.optimizer or model.optimizer
    if optimizer not in OPTIMIZER_SLOTS:
        raise plan_error("--optimizer", optimizer, ", ".join(OPTIMIZER_SLOTS),
                         "pass one of those names")
    return PlanRequest(
        model, gpu, args.precision, args.gpus_per_node, nodes,
        hardware.get_intra(gpu.intra if args.intra == "auto" else args.intra), network,
        args.nics_per_node, args.global_batch, args.batch_size, args.grad_accum_steps,
        optimizer, args.gradient_checkpointing, args.compression, overlap,
        fusion_mb * 2 ** 20, cycle_ms * 1e-3, args.target_hours,
        args.target_efficiency, _train_samples(args, model), args.objective,
        args.price_per_gpu_hour, _horovod_build(args.horovod_build),
        args.shard_optimizer_state)


# The planner's old flag names, now the trainer's.
RENAMED = {"--fusion_mb": "--fusion_threshold_mb", "--cycle_ms": "--cycle_time_ms"}


def _refuse_old_names(argv: list[str]) -> None:
    for arg in argv:
        old = arg.partition("=")[0]
        if old in RENAMED:
            raise plan_error(old, arg, f"the trainer's name, {RENAMED[old]} (same unit)",
                             f"pass {RENAMED[old]} instead")


def run(argv: list[str], out=None, prog: str = PROG) -> int:
    out = out or sys.stdout
    _refuse_old_names(argv)
    args = build_parser(prog).parse_args(argv)
    req = request_from_args(args)
    a = Assumptions()
    calib = calibrate(args.calibrate, req, a) if args.calibrate else Calibration()
    rows = evaluate_all(req, a, calib)
    rec = recommend(req, rows, a, calib)
    if args.plot:
        try:
            plot.plot(req, rows, args.plot, rec)
        except ImportError as err:
            raise plan_error("--plot", args.plot, "matplotlib installed",
                             "pip install matplotlib, or drop --plot") from err
    said = {"length": length_source(args, req.model), "trainer": trainer_verdict(args.model)}
    if args.json:
        out.write(json.dumps({**report.to_dict(req, rows, rec, a, calib), **said},
                             indent=2) + "\n")
    else:
        out.write(report.to_text(req, rows, rec, a, calib, ["; ".join(said.values())]))
        if args.plot:
            out.write(f"plot: {args.plot}\n")
    return 0 if rec.row is not None else 1


def main(argv: list[str], prog: str = PROG) -> int:
    try:
        return run(normalize_flag_names(list(argv)), prog=prog)
    except PlanError as err:            # bad input: one line, no traceback
        console.last_line(usage.error_line(prog, err))
        return 2
    except SystemExit as done:          # --help
        return int(done.code or 0)
