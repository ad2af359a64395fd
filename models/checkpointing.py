"""Per-block gradient checkpointing (activation rematerialisation) for Keras 3 blocks.

A block subclasses `CheckpointedBlock` and implements `forward(x, training)`. With
`gradient_checkpointing=False` the block is an ordinary layer. With True, `call` wraps
`forward` in `keras.remat` (on TensorFlow: `tf.recompute_grad`): the forward pass keeps
only the block's input, and the backward pass re-runs `forward` to rebuild the
activations it needs.

Why not `keras.RematScope` or a bare `tf.recompute_grad`: a block has state that its
forward pass changes (BatchNorm moving statistics, the dropout seed generator). Re-running
the forward naively would update the moving statistics twice per step and draw a
*different* dropout mask in the backward pass than in the forward pass, so gradients would
be wrong. Here the block snapshots its non-trainable state before the forward pass and
restores that snapshot at the start of every run of `forward`: the recomputation sees
exactly the state the original forward saw (same mask, same batch statistics) and leaves
the state exactly where the original forward left it. The snapshot is a few per-channel
vectors and seeds, negligible next to the activations it saves.

Rules for subclasses:
  * create every sub-layer in `__init__` and build them all in `build()`, and implement
    `compute_output_shape`, so that Keras never traces `call` symbolically;
  * pass `training=training` explicitly to every sub-layer: the recomputation runs outside
    the Keras call context, where `training` would otherwise default to inference.
"""
import keras


class CheckpointedBlock(keras.layers.Layer):
    """Base class for residual / transformer blocks that can recompute their activations."""

    def __init__(self, gradient_checkpointing=False, **kwargs):
        # autocast=False: the block owns no variables of its own, and reading the state
        # snapshot must not cast float32 statistics to the compute dtype (sub-layers still
        # autocast their own weights under a mixed-precision policy).
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.gradient_checkpointing = bool(gradient_checkpointing)

    def forward(self, inputs, training=None):
        raise NotImplementedError

    def call(self, inputs, training=None):
        if not self.gradient_checkpointing:
            return self.forward(inputs, training=training)
        state = self.non_trainable_variables
        # ops.copy reads the variable into a new tensor (convert_to_tensor would hand back
        # the TF variable itself, which later assignments change).
        snapshot = [keras.ops.copy(v.value) for v in state]

        def replay(x):
            for variable, value in zip(state, snapshot):
                variable.assign(value)
            return self.forward(x, training=training)

        return keras.remat(replay)(inputs)

    def get_config(self):
        config = super().get_config()
        config["gradient_checkpointing"] = self.gradient_checkpointing
        return config


def build_chain(sublayers, input_shape):
    """Builds `sublayers` in sequence; returns the output shape of the last one."""
    shape = tuple(input_shape)
    for layer in sublayers:
        if not layer.built:
            layer.build(shape)
        shape = tuple(layer.compute_output_shape(shape))
    return shape
