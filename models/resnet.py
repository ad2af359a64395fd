"""ResNet-18/34/50/101/152 (He et al. 2015, "v1.5" variant) for ImageNet and 32x32 images.

Matches torchvision's layout, so parameter counts match its published numbers exactly:
convolutions have no bias (BatchNorm follows each), bottleneck blocks downsample on the
3x3 convolution (v1.5), shortcuts are a 1x1 convolution + BatchNorm when the shape
changes. BatchNorm uses torchvision's momentum 0.1 (Keras momentum 0.9) and epsilon 1e-5.
Padding is explicit and symmetric for strided convolutions, as in torchvision.

The small-input variant (`*_cifar`) replaces the 7x7/2 stem and the max-pool by a 3x3/1
convolution, so a 32x32 image reaches the last stage at 4x4 (total stride 8).

Every residual block is a `CheckpointedBlock`: `gradient_checkpointing=True` recomputes its
activations in the backward pass. Logits are float32 under any mixed-precision policy.
"""
import keras
from keras import layers, ops

from models.checkpointing import CheckpointedBlock, build_chain

# depth -> (block type, blocks per stage)
_DEPTHS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
_STAGE_WIDTHS = (64, 128, 256, 512)
_STAGE_STRIDES = (1, 2, 2, 2)
# He-normal with fan_out, as torchvision initialises its convolutions.
_CONV_INIT = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def _conv_bn(filters, kernel, stride, prefix, zero_gamma=False):
    """[pad,] conv (no bias), batch norm: the unit every ResNet path is made of."""
    seq = []
    padding = "same"
    if stride > 1 and kernel > 1:
        # Symmetric padding like torchvision; Keras "same" pads only bottom/right here.
        seq.append(layers.ZeroPadding2D(kernel // 2, name=f"{prefix}_pad"))
        padding = "valid"
    seq.append(layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                             kernel_initializer=_CONV_INIT, name=f"{prefix}_conv"))
    seq.append(layers.BatchNormalization(
        momentum=0.9, epsilon=1e-5, gamma_initializer="zeros" if zero_gamma else "ones",
        name=f"{prefix}_bn"))
    return seq


def _run(seq, x, training):
    for layer in seq:
        x = layer(x, training=training)
    return x


@keras.saving.register_keras_serializable(package="models")
class ResidualBlock(CheckpointedBlock):
    """A basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 with 4x expansion) residual block.

    `filters` is the stage width; a bottleneck block outputs 4 * filters channels.
    `project` adds the 1x1 convolution shortcut (needed when the shape changes).
    `zero_init_residual` starts the last BatchNorm's gamma at zero, so every block
    begins as the identity (Goyal et al. 2017; helps large-batch training).
    """

    def __init__(self, kind, filters, stride=1, project=False, zero_init_residual=False,
                 **kwargs):
        super().__init__(**kwargs)
        if kind not in ("basic", "bottleneck"):
            raise ValueError(f"ResidualBlock kind must be 'basic' or 'bottleneck'; got {kind!r}")
        self.kind, self.filters, self.stride = kind, filters, stride
        self.project, self.zero_init_residual = project, zero_init_residual
        if kind == "basic":
            plan = [(filters, 3, stride), (filters, 3, 1)]
            out_channels = filters
        else:
            plan = [(filters, 1, 1), (filters, 3, stride), (4 * filters, 1, 1)]
            out_channels = 4 * filters
        last = len(plan) - 1
        self.units = [_conv_bn(f, k, s, f"conv{i + 1}", zero_gamma=zero_init_residual and i == last)
                      for i, (f, k, s) in enumerate(plan)]
        self.shortcut = _conv_bn(out_channels, 1, stride, "shortcut") if project else []

    def build(self, input_shape):
        shape = input_shape
        for unit in self.units:
            shape = build_chain(unit, shape)
        build_chain(self.shortcut, input_shape)

    def compute_output_shape(self, input_shape):
        shape = input_shape
        for unit in self.units:
            for layer in unit:
                shape = layer.compute_output_shape(shape)
        return shape

    def forward(self, inputs, training=None):
        x = inputs
        last = len(self.units) - 1
        for i, unit in enumerate(self.units):
            x = _run(unit, x, training)
            if i < last:
                x = ops.relu(x)
        shortcut = _run(self.shortcut, inputs, training) if self.project else inputs
        return ops.relu(x + shortcut)

    def get_config(self):
        config = super().get_config()
        config.update(kind=self.kind, filters=self.filters, stride=self.stride,
                      project=self.project, zero_init_residual=self.zero_init_residual)
        return config


def _check_positive_int(value, what, fix):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer; received {value!r}. Fix: {fix}")


def _check_image_shape(input_shape, total_stride, model_name):
    """Rejects shapes the network cannot process, before any layer is built."""
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else input_shape
    if not isinstance(shape, tuple) or len(shape) != 3:
        raise ValueError(
            f"{model_name}: input_shape must be (height, width, channels); received "
            f"{input_shape!r}. Fix: pass e.g. input_shape=(224, 224, 3).")
    height, width, channels = shape
    small = [(n, s) for n, s in (("height", height), ("width", width))
             if s is not None and s < total_stride]
    if small:
        got = ", ".join(f"{n}={s}" for n, s in small)
        raise ValueError(
            f"{model_name}: image too small for a network with total stride {total_stride}: "
            f"received input_shape={shape} ({got}); expected height and width >= "
            f"{total_stride}. Fix: feed images of at least {total_stride}x{total_stride}, "
            f"or use the small-input variant (e.g. resnet18_cifar, total stride 8) for small images.")
    if channels is None or channels < 1:
        raise ValueError(f"{model_name}: input_shape needs a known, positive channel count; "
                         f"received {shape}. Fix: pass e.g. (32, 32, 3).")
    return shape


def _stem(x, small_input):
    if small_input:
        x = _run(_conv_bn(64, 3, 1, "stem"), x, None)
        return layers.ReLU(name="stem_relu")(x)
    x = _run(_conv_bn(64, 7, 2, "stem"), x, None)
    x = layers.ReLU(name="stem_relu")(x)
    # Zero padding equals torchvision's -inf padding here: inputs are post-ReLU (>= 0).
    x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    return layers.MaxPooling2D(3, strides=2, name="stem_pool")(x)


def resnet(*, depth=50, input_shape=None, num_classes=None, include_top=True, small_input=False,
           gradient_checkpointing=False, zero_init_residual=False, **_unused):
    """Builds a ResNet; keyword arguments only (unknown ones are ignored).

    Defaults: ImageNet (224, 224, 3) and 1000 classes, or (32, 32, 3) and 10 classes with
    small_input=True. include_top=False returns the pooled features (float32) instead.
    """
    if depth not in _DEPTHS:
        raise ValueError(f"ResNet depth must be one of {sorted(_DEPTHS)}; received {depth!r}. "
                         f"Fix: pick one of those (e.g. depth=50).")
    name = f"resnet{depth}" + ("_cifar" if small_input else "")
    total_stride = 8 if small_input else 32
    if input_shape is None:
        input_shape = (32, 32, 3) if small_input else (224, 224, 3)
    if num_classes is None:
        num_classes = 10 if small_input else 1000
    input_shape = _check_image_shape(input_shape, total_stride, name)
    _check_positive_int(num_classes, f"{name}: num_classes", "pass num_classes >= 1.")

    kind, blocks_per_stage = _DEPTHS[depth]
    expansion = 4 if kind == "bottleneck" else 1
    inputs = keras.Input(shape=input_shape, name="image")
    x = _stem(inputs, small_input)
    channels = 64
    for stage, (width, stride, count) in enumerate(
            zip(_STAGE_WIDTHS, _STAGE_STRIDES, blocks_per_stage), start=1):
        for index in range(count):
            block_stride = stride if index == 0 else 1
            project = block_stride != 1 or channels != width * expansion
            x = ResidualBlock(kind, width, stride=block_stride, project=project,
                              zero_init_residual=zero_init_residual,
                              gradient_checkpointing=gradient_checkpointing,
                              name=f"stage{stage}_block{index + 1}")(x)
            channels = width * expansion
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    if include_top:
        x = layers.Dense(num_classes, name="logits_dense")(x)
        # float32 whatever the policy: softmax/cross-entropy in 16 bits lose precision.
        outputs = layers.Activation("linear", dtype="float32", name="logits")(x)
    else:
        outputs = layers.Activation("linear", dtype="float32", name="features")(x)
    return keras.Model(inputs, outputs, name=name)


def resnet18(**kwargs):
    return resnet(**{**kwargs, "depth": 18})


def resnet34(**kwargs):
    return resnet(**{**kwargs, "depth": 34})


def resnet50(**kwargs):
    return resnet(**{**kwargs, "depth": 50})


def resnet101(**kwargs):
    return resnet(**{**kwargs, "depth": 101})


def resnet152(**kwargs):
    return resnet(**{**kwargs, "depth": 152})


def resnet18_cifar(**kwargs):
    return resnet(**{**kwargs, "depth": 18, "small_input": True})


def resnet34_cifar(**kwargs):
    return resnet(**{**kwargs, "depth": 34, "small_input": True})


def resnet50_cifar(**kwargs):
    return resnet(**{**kwargs, "depth": 50, "small_input": True})
