"""Horovod's DistributedGradientTape on Keras 3: a tf.GradientTape whose gradient()
returns the gradients reduced over ranks.

    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))

The reduction is the Keras drop-in's, not a copy: Horovod's keywords resolved by
hvd_options.resolve, the reduce of hvd_options.gradient_mean (the backend's
allreduce_gradients, in buckets, with the compression asked for), and
update.reduce_gradients for op=Sum and the local sources of
PartialDistributedGradientTape. Sparse gradients (tf.IndexedSlices) are gathered, as
Horovod does, unless sparse_as_dense. Horovod's own tape keys sources by
tf.Variable.ref(), which a Keras 3 variable lacks: that is where it fails on Keras 3;
here a source is keyed by the tf.Variable it holds.

The divergence guard follows each reduction (divergence_guard.SourceGuard): rank 0's
sources are broadcast at the first call, and their checksums compared every
divergence_check_steps calls.
"""
import tensorflow as tf

from horovod_train import update
from horovod_train.backends.comm import plain
from horovod_train.errors import UsageError
from horovod_train.keras import divergence_guard, hvd_options
from horovod_train.keras import horovod_api as api
from horovod_train.keras.compression import Compression
from horovod_train.keras.hvd_options import DEFAULT_DIVERGENCE_CHECK_STEPS


class _DistributedTape(tf.GradientTape):
    """The user's tape (its recording shared, not copied) with a reducing gradient()."""

    def __init__(self, tape, opts, sparse_as_dense: bool, scale_local_gradients: bool):
        # Not GradientTape.__init__: this object takes over the recorded tape as it is.
        self.__dict__.update(tape.__dict__)
        self._hvd_opts = opts
        self._sparse_as_dense = sparse_as_dense
        self._update_options = update.UpdateOptions(
            sum_over_ranks=opts.op is api.Sum, scale_local_gradients=scale_local_gradients)
        self._local_sources = set()

    def register_local_source(self, source):
        """A source whose gradient stays on this rank (divided by the rank count when
        scale_local_gradients, as Horovod's)."""
        self._local_sources.add(id(_key(source)))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        reduced = self._reduce(flat_sources, tf.nest.flatten(grads))
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """([(source, gradient)] of the local sources, and of the others)."""
        pairs = list(zip(sources, self.gradient(target, sources, output_gradients)))
        local = [(s, g) for s, g in pairs if id(_key(s)) in self._local_sources]
        return local, [(s, g) for s, g in pairs if id(_key(s)) not in self._local_sources]

    def _reduce(self, sources, grads) -> list:
        strategy = api.joined("DistributedGradientTape.gradient")
        size, opts = strategy.backend.info.size, self._hvd_opts
        if self._sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        sparse = [isinstance(g, tf.IndexedSlices) for g in grads]
        local = [id(_key(s)) in self._local_sources for s in sources]
        dense, _ = update.reduce_gradients(
            [None if s else g for g, s in zip(grads, sparse)],
            hvd_options.gradient_mean(strategy.backend, opts), local=local, size=size,
            options=self._update_options)
        out = [self._sparse(g, is_local, size) if is_sparse else d
               for g, d, is_sparse, is_local in zip(grads, dense, sparse, local)]
        # The guard's: shared variables only (not watched tensors, nor local sources,
        # which may differ in value and shape from rank to rank: model parallelism).
        variables = [s for s, is_local in zip(sources, local)
                     if hasattr(s, "assign") and not is_local]
        if size > 1 and variables:
            guard = divergence_guard.source_guard(strategy, [_key(v) for v in variables],
                                                  opts.divergence_check_steps)
            guard.on_gradients(strategy.backend, variables)
        return out

    def _sparse(self, grad, is_local: bool, size: int):
        if not is_local:
            return api.sparse_allreduce(grad, self._hvd_opts.op)
        if self._update_options.scale_local_gradients and size > 1:
            return tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype),
                                    grad.indices, grad.dense_shape)
        return grad


def _key(source):
    """The tf.Variable a source holds (a Keras 3 variable's); a tf.Variable or a watched
    tensor is its own."""
    return plain(source) if hasattr(source, "assign") else source


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=None,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=api.global_process_set, scale_local_gradients=True,
                            *, divergence_check_steps=DEFAULT_DIVERGENCE_CHECK_STEPS):
    """`gradtape`, whose gradient() returns gradients reduced over every rank (op:
    hvd.Average unless hvd.Sum). device_* are accepted and unused (TensorFlow places
    the collectives); groups/num_groups are fusion hints, which the backend's buckets
    replace; gradient_predivide_factor only moves where the mean divides."""
    if not isinstance(gradtape, tf.GradientTape):
        raise UsageError(f"DistributedGradientTape: received {type(gradtape).__name__}; "
                             f"expected a tf.GradientTape. Fix: wrap the tape of `with "
                             f"tf.GradientTape() as tape:` after the block")
    opts = hvd_options.resolve(
        compression=compression, op=op, gradient_predivide_factor=gradient_predivide_factor,
        backward_passes_per_step=1, accum_steps=None, average_aggregated_gradients=False,
        groups=groups, num_groups=num_groups, process_set=process_set,
        divergence_check_steps=divergence_check_steps)
    return _DistributedTape(gradtape, opts, bool(sparse_as_dense), bool(scale_local_gradients))


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=None, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=api.global_process_set,
                                   local_layers=None, scale_local_gradients=True, **kwargs):
    """DistributedGradientTape whose `local_layers`' gradients stay on each rank."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients, **kwargs)
    layers = [] if local_layers is None else (
        list(local_layers) if isinstance(local_layers, (list, tuple)) else [local_layers])
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise UsageError(f"local_layers: received {type(layer).__name__}; expected "
                                 f"Keras layers. Fix: pass local_layers=[model.layers[-1]]")
        for variable in layer.trainable_weights:
            tape.register_local_source(variable)
    return tape
