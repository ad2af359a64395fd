"""The one update kernel: accumulate -> reduce -> unscale -> finite check -> apply or
skip -> loss-scale update, written once for every engine that trains.

Order matters for correctness across ranks:
  1. k micro-batches' gradients are summed locally, still scaled by the loss scale
     (finish_accumulation: their mean, so k micro-batches of b update as one batch of
     k*b; or Horovod's sum);
  2. ONE reduction of the accumulated gradients over ranks (`reduce`, injected: the
     kernel never names a backend); a caller's scalars that every rank must agree on
     (the CLI's stop vote) ride in the same call (`riders`);
  3. unscale, then check finiteness on the REDUCED values: they are the same on every
     rank, so is the verdict, and every rank skips or applies the same steps;
  4. apply, or skip on every rank together; the loss scale adapts
     (precision.DynamicLossScale: halve on a skip, double after N finite steps).

Who calls it:
  - the CLI's TrainStep (step.py): one batch of k*b arrives and is split inside the
    compiled step (its micro-batch loop ends in finish_accumulation), then
    reduce_gradients (reduce = backend.allreduce_gradients, the stop vote a rider),
    then apply_update; the XLA split (xla_split.XlaSplit) puts 1 and 3-4 in XLA
    functions and 2 between them;
  - the Keras drop-in's DistributedOptimizer (keras/optimizer.py): k apply() calls
    fill an Accumulator, whose k-th call flushes it through reduce_gradients and
    apply_update (reduce = the backend's allreduce_gradients, with Horovod's compression);
  - the GradientTape API (horovod_train.tensorflow's DistributedGradientTape):
    .gradient(loss, sources) is reduce_gradients with its options (op, compression,
    the local sources of PartialDistributedGradientTape, scale_local_gradients); the
    tape returns reduced gradients and the user's optimizer applies them, as with
    Horovod. Its divergence guard (keras/divergence_guard.SourceGuard: the first-call
    broadcast and the periodic checksum) follows the reduction, so no third copy of
    any step is written.
"""
import dataclasses

import tensorflow as tf

from horovod_train.precision import all_finite


@dataclasses.dataclass(frozen=True)
class UpdateOptions:
    accum_steps: int = 1  # micro-batches (or apply calls) per update
    mean_of_micro_batches: bool = True  # False: Horovod's backward_passes_per_step sum
    sum_over_ranks: bool = False  # Horovod's op=Sum: the ranks' mean times their count
    scale_local_gradients: bool = True  # a rank-local gradient divided by the rank count


def finish_accumulation(total, options: UpdateOptions) -> list:
    """The update's gradients from the sum of k micro-batches' (None kept): the mean of
    k equal micro-batch means is the mean over the k*b batch."""
    k = options.accum_steps
    if k == 1 or not options.mean_of_micro_batches:
        return list(total)
    return [None if g is None else g / tf.cast(k, g.dtype) for g in total]


class Accumulator:
    """k calls' gradients summed in variables; the k-th call updates with their total.
    `make_slot(variable)` creates one zero variable shaped like `variable` (a Keras
    optimizer's add_variable_from_reference, so the slots are saved with it)."""

    def __init__(self, variables, make_slot, options: UpdateOptions):
        self.options = options
        self.slots = [make_slot(v) for v in variables]

    def add(self, grads, calls, flush):
        """Adds this call's gradients; on the k-th call (`calls`, counted from 0 before
        this one) runs flush(gradients) with the finished total, then empties the slots."""
        for slot, g in zip(self.slots, grads):
            if g is not None:
                slot.assign_add(tf.cast(g, slot.dtype))

        def flush_and_reset():
            totals = [tf.convert_to_tensor(s) for s in self.slots]  # Keras or tf variables
            flush(finish_accumulation(totals, self.options))
            for slot, total in zip(self.slots, totals):
                slot.assign(tf.zeros_like(total))
            return tf.no_op()
        due = tf.equal((calls + 1) % self.options.accum_steps, 0)
        tf.cond(due, flush_and_reset, tf.no_op)


def reduce_gradients(grads, reduce, *, riders=(), local=(), size=1,
                     options: UpdateOptions = UpdateOptions()):
    """(gradients over ranks, riders over ranks), in ONE call of reduce(list) -> list.

    None gradients stay None; `local` (a bool per gradient) keeps a rank-local
    gradient out of the reduction (divided by `size` when scale_local_gradients, as
    Horovod's register_local_var). `riders`: scalars or tensors reduced with them."""
    grads, riders = list(grads), list(riders)
    local = list(local) or [False] * len(grads)
    shared = [i for i, g in enumerate(grads) if g is not None and not local[i]]
    reduced = reduce([grads[i] for i in shared] + riders) if shared or riders else []
    for i, g in zip(shared, reduced):
        grads[i] = g * tf.cast(size, g.dtype) if options.sum_over_ranks else g
    if options.scale_local_gradients and size > 1:
        grads = [g / tf.cast(size, g.dtype) if g is not None and local[i] else g
                 for i, g in enumerate(grads)]
    return grads, list(reduced[len(shared):])


def unscaled_and_verdict(grads, loss_scale):
    """(the gradients unscaled, None kept; whether all of them are finite)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    grads = list(grads)
    for i, g in zip(present, loss_scale.unscale([grads[i] for i in present])):
        grads[i] = g
    return grads, all_finite([grads[i] for i in present])


def apply_update(grads, loss_scale, apply, on_skip=None, agreed=None):
    """Unscale, check finiteness, apply(grads) or on_skip(), adapt the loss scale;
    returns the verdict (a bool tensor). Called with reduced gradients only: they are
    the same on every rank, so is the verdict, and all ranks skip together. With the
    optimizer state sharded each rank holds only its shard of them: the caller agreed
    on the verdict over ranks (`agreed`, from unscaled_and_verdict on every shard)."""
    grads, finite = unscaled_and_verdict(grads, loss_scale)
    if agreed is not None:
        finite = agreed

    def apply_branch():
        apply(grads)
        return tf.no_op()

    def skip_branch():
        if on_skip is not None:
            on_skip()
        return tf.no_op()
    tf.cond(finite, apply_branch, skip_branch)
    loss_scale.update(finite)
    return finite
