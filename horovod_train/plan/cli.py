"""`python -m horovod_train plan ...`: flags -> PlanRequest -> tables / JSON / PNG.

main(argv) returns 0 when at least one configuration fits, 1 when none does (the
report says why), and 2 on bad input (one line on stderr: received / expected / fix).
"""
from __future__ import annotations

import argparse
import json
import sys

from horovod_train.plan import hardware
from horovod_train.plan.calibrate import calibrate
from horovod_train.plan.cost import OPTIMIZER_SLOTS, Assumptions, Calibration
from horovod_train.plan.errors import PlanError, plan_error
from horovod_train.plan.models import get_model
from horovod_train.plan.recommend import PlanRequest, evaluate_all, recommend
from horovod_train.plan import report


class _Parser(argparse.ArgumentParser):
    def error(self, message):             # one line, raised instead of sys.exit
        raise PlanError(f"plan: {message}. Fix: see `python -m horovod_train plan --help`")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m horovod_train plan",
                description="Predict memory, step time and scaling efficiency of data-parallel "
                            "training before renting the cluster.")
    p.add_argument("--model", required=True, help="resnet18/50/101/152, bert-base, bert-large, "
                   "gpt2-small/medium/large/xl, digits_cnn, or gpt:layers=L,hidden=H,heads=A")
    p.add_argument("--seq_len", type=int, help="sequence length (transformers)")
    batch = p.add_mutually_exclusive_group(required=True)
    batch.add_argument("--global_batch", type=int, help="samples per optimizer step, all GPUs")
    batch.add_argument("--batch_per_gpu", type=int, help="micro-batch per GPU (weak scaling)")
    p.add_argument("--gpu", required=True, help=", ".join(sorted(hardware.GPUS)))
    p.add_argument("--gpus_per_node", type=int, default=8)
    p.add_argument("--interconnect", help="inter-node network: " + ", ".join(hardware.NETWORKS))
    p.add_argument("--nics_per_node", type=int, default=1,
                   help="network ports per node (DGX A100/H100: 8, one per GPU)")
    p.add_argument("--intra", default="auto",
                   help="intra-node link: auto (the GPU's) or " + ", ".join(hardware.INTRA_LINKS))
    p.add_argument("--nodes", default="1", help="comma-separated node counts, e.g. 1,2,4,8")
    p.add_argument("--precision", default="fp32", help=", ".join(hardware.PRECISIONS))
    p.add_argument("--optimizer", help="sgd, momentum, adam, adamw, lamb (default: the model's)")
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--grad_accum_steps", type=int, default=1)
    p.add_argument("--compression", default="none", help="none or fp16 (allreduce in fp16)")
    p.add_argument("--overlap", action="store_true",
                   help="allreduce overlaps backprop (Horovod DistributedOptimizer); default: "
                        "one grouped allreduce after backprop, as horovod_train does")
    p.add_argument("--fusion_mb", type=float, default=128.0, help="HOROVOD_FUSION_THRESHOLD")
    p.add_argument("--cycle_ms", type=float, default=1.0, help="HOROVOD_CYCLE_TIME")
    p.add_argument("--target_hours", type=float, help="recommend the fewest GPUs within this")
    p.add_argument("--target_efficiency", type=float, default=0.8, help="0-1, default 0.8")
    p.add_argument("--epochs", type=float, help="training length, with --dataset_size")
    p.add_argument("--dataset_size", type=int, help="samples per epoch (default: the model's)")
    p.add_argument("--train_samples", type=float, help="total samples to train on")
    p.add_argument("--calibrate", metavar="RUN_DIR", help="a run directory with summary.json")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--plot", metavar="FILE.png", help="write efficiency vs GPU count")
    return p


def _positive(flag: str, value, allow_none=True):
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise plan_error(flag, value, "a positive number", f"pass {flag} N with N > 0")


def _nodes(text: str) -> tuple[int, ...]:
    try:
        nodes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        nodes = ()
    if not nodes or min(nodes) < 1:
        raise plan_error("--nodes", text, "comma-separated positive integers",
                         "e.g. --nodes 1,2,4,8")
    return tuple(sorted(set(nodes)))


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
    for flag in ("seq_len", "global_batch", "batch_per_gpu", "target_hours", "epochs",
                 "dataset_size", "train_samples", "cycle_ms"):
        _positive("--" + flag, getattr(args, flag))
    for flag in ("gpus_per_node", "nics_per_node", "grad_accum_steps"):
        _positive("--" + flag, getattr(args, flag), allow_none=False)
    if args.fusion_mb < 0:
        raise plan_error("--fusion_mb", args.fusion_mb, "0 (no fusion) or more", "pass e.g. 128")
    if not 0 < args.target_efficiency <= 1:
        raise plan_error("--target_efficiency", args.target_efficiency, "a fraction in (0, 1]",
                         "pass 0.8 for 80%")
    if args.compression not in ("none", "fp16"):
        raise plan_error("--compression", args.compression, "none or fp16", "pass --compression fp16")
    model = get_model(args.model, args.seq_len)
    gpu = hardware.get_gpu(args.gpu)
    hardware.check_precision(args.precision)
    hardware.peak_flops(gpu, args.precision)          # rejects bf16 on pre-Ampere now
    nodes = _nodes(args.nodes)
    network = hardware.get_network(args.interconnect) if args.interconnect else None
    if network is None and max(nodes) > 1:
        raise plan_error("--interconnect", None, f"a network for {max(nodes)} nodes",
                         "pass --interconnect " + "|".join(hardware.NETWORKS))
    optimizer = args.optimizer or model.optimizer
    if optimizer not in OPTIMIZER_SLOTS:
        raise plan_error("--optimizer", optimizer, ", ".join(OPTIMIZER_SLOTS),
                         "pass one of those names")
    return PlanRequest(
        model, gpu, args.precision, args.gpus_per_node, nodes,
        hardware.get_intra(gpu.intra if args.intra == "auto" else args.intra), network,
        args.nics_per_node, args.global_batch, args.batch_per_gpu, args.grad_accum_steps,
        optimizer, args.gradient_checkpointing, args.compression, args.overlap,
        args.fusion_mb * 2 ** 20, args.cycle_ms * 1e-3, args.target_hours,
        args.target_efficiency, _train_samples(args, model))


def run(argv: list[str], out=None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    req = request_from_args(args)
    a = Assumptions()
    calib = calibrate(args.calibrate, req, a) if args.calibrate else Calibration()
    rows = evaluate_all(req, a, calib)
    rec = recommend(req, rows, a, calib)
    if args.plot:
        try:
            report.plot(req, rows, args.plot)
        except ImportError as err:
            raise plan_error("--plot", args.plot, "matplotlib installed",
                             "pip install matplotlib, or drop --plot") from err
    if args.json:
        out.write(json.dumps(report.to_dict(req, rows, rec, a, calib), indent=2) + "\n")
    else:
        out.write(report.to_text(req, rows, rec, a, calib))
        if args.plot:
            out.write(f"plot: {args.plot}\n")
    return 0 if any(r.fits for r in rows) else 1


def main(argv: list[str]) -> int:
    try:
        return run(list(argv))
    except PlanError as err:            # bad input: one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as done:          # --help
        return int(done.code or 0)
