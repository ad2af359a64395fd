"""DistributedOptimizer's reduction options: Horovod's keywords, checked, in one record.

Two ways to ask for gradient accumulation, each with its own meaning:
  - Horovod's `backward_passes_per_step=k`: the k micro-batch gradients are SUMMED
    (averaged only with average_aggregated_gradients=True), and `optimizer.iterations`
    counts backward passes, as Horovod's does;
  - ours, `accum_steps=k` (strategy.distributed_optimizer): averaged, so k micro-batches
    of b equal one batch of k*b, and `iterations` counts applied updates.
"""
import dataclasses

from horovod_train import divergence
from horovod_train.backends.comm import ReduceOp
from horovod_train.errors import UsageError, check_range
from horovod_train.keras import compression as comp
from launch import contract

DEFAULT_DIVERGENCE_CHECK_STEPS = divergence.DEFAULT_IN_STEP_CHECK_STEPS


@dataclasses.dataclass(frozen=True)
class ReductionOptions:
    compressor: type | None  # a compression.Compressor class; None: the backend's own
    wire: str | None  # its backend name; None for a user's own compressor, or none given
    op: ReduceOp  # AVERAGE or SUM over ranks
    accum_steps: int
    mean_of_micro_batches: bool
    iterations_count_passes: bool  # Horovod's meaning of optimizer.iterations
    divergence_check_steps: int


def resolve(*, compression, op, gradient_predivide_factor, backward_passes_per_step,
            accum_steps, average_aggregated_gradients, groups, num_groups, process_set,
            divergence_check_steps) -> ReductionOptions:
    compressor, wire = _compressor(compression)
    op = _op(op)
    check_range("gradient_predivide_factor", gradient_predivide_factor, 0, high=None,
                expected="a finite number > 0",
                fix="pass gradient_predivide_factor=1.0 (it only moves where the mean divides)")
    if gradient_predivide_factor == 0:
        raise UsageError("gradient_predivide_factor: received 0; expected a finite number > 0. "
                         "Fix: pass gradient_predivide_factor=1.0")
    _check_groups(groups if groups is not None else num_groups)
    if process_set is not None and repr(process_set) != "hvd.global_process_set":
        raise UsageError(f"process_set: received {process_set!r}; expected the global process "
                         f"set. Fix: drop process_set=..., gradients are reduced over all ranks")
    ours = accum_steps is not None
    if ours and backward_passes_per_step not in (1, accum_steps):
        raise UsageError(f"DistributedOptimizer: received accum_steps={accum_steps!r} and "
                         f"backward_passes_per_step={backward_passes_per_step!r}; expected one "
                         f"of them. Fix: pass backward_passes_per_step=k (Horovod's sum) or "
                         f"accum_steps=k (the mean)")
    steps = accum_steps if ours else backward_passes_per_step
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise UsageError(f"backward_passes_per_step: received {steps!r}; expected an int >= 1. "
                         f"Fix: pass backward_passes_per_step=k with k micro-batches per update")
    if not isinstance(divergence_check_steps, int) or divergence_check_steps < 0:
        raise UsageError(f"divergence_check_steps: received {divergence_check_steps!r}; expected "
                         f"an int >= 0 (0: off). Fix: pass divergence_check_steps="
                         f"{DEFAULT_DIVERGENCE_CHECK_STEPS}")
    return ReductionOptions(compressor, wire, op, steps,
                            mean_of_micro_batches=ours or bool(average_aggregated_gradients),
                            iterations_count_passes=not ours,
                            divergence_check_steps=divergence_check_steps)


def gradient_mean(backend, opts: ReductionOptions):
    """The reduce(list) -> list that the update kernel (horovod_train.update) is given
    for Horovod's options: the backend's in-graph mean, on the wire the compression
    names; a user's own Compressor wraps an uncompressed mean. DistributedOptimizer and
    DistributedGradientTape (horovod_train/tensorflow/tape.py) use it."""
    def reduce(tensors):
        if opts.compressor is None:
            return backend.allreduce_gradients(tensors)
        if opts.wire is not None:
            return backend.allreduce_gradients(tensors, compression=opts.wire)
        return comp.around(opts.compressor, tensors,
                           lambda sent: backend.allreduce_gradients(sent, compression="none"))
    return reduce


def to_config(opts: ReductionOptions) -> dict:
    """Constructor keywords that rebuild the same options (get_config/from_config)."""
    config = {"compression": opts.wire, "op": opts.op.value,
              "divergence_check_steps": opts.divergence_check_steps}
    if opts.iterations_count_passes:
        config.update(backward_passes_per_step=opts.accum_steps,
                      average_aggregated_gradients=opts.mean_of_micro_batches)
    else:
        config.update(accum_steps=opts.accum_steps)
    return config


def _compressor(compression):
    if compression is None:  # the backend's own (htk.Strategy(compression=...))
        return None, None
    if isinstance(compression, str):
        if compression not in contract.COMPRESSIONS:
            raise UsageError(f"compression: received {compression!r}; expected one of "
                             f"{', '.join(contract.COMPRESSIONS)} or hvd.Compression.*. Fix: "
                             f"pass compression=hvd.Compression.fp16")
        return comp.by_name(compression), compression
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise UsageError(f"compression: received {compression!r}; expected hvd.Compression.none, "
                         f".fp16, .bf16 or a Compressor with compress/decompress. Fix: pass "
                         f"compression=hvd.Compression.fp16")
    return compression, comp.wire_name(compression)


def _op(op) -> ReduceOp:
    if op is None:
        return ReduceOp.AVERAGE
    if isinstance(op, str):
        op = next((o for o in ReduceOp if o.value == op), op)
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise UsageError(f"DistributedOptimizer op: received {op!r}; expected hvd.Average or "
                         f"hvd.Sum (as Horovod's). Fix: pass op=hvd.Average")
    return op


def _check_groups(groups):
    """Horovod's explicit fusion groups: accepted (Horovod fuses our one grouped call
    as its fusion buffer allows); a malformed value is still refused, as Horovod does."""
    if isinstance(groups, list) or (isinstance(groups, int) and groups >= 0):
        return
    raise UsageError(f"groups: received {groups!r}; expected an int >= 0 or a list of lists of "
                     f"variables. Fix: drop groups=...")
