"""Building blocks of the Transformer models: embeddings and the pre-LayerNorm block."""
import math

import keras
from keras import layers, ops

from models.checkpointing import CheckpointedBlock

# GPT-2 / BERT initialisation: N(0, 0.02) truncated.
_INIT_STD = 0.02


def _init(std=_INIT_STD):
    return keras.initializers.TruncatedNormal(stddev=std)


@keras.saving.register_keras_serializable(package="models")
class TokenEmbedding(layers.Layer):
    """Token embedding that can also act as the (tied) output projection.

    `layer(ids)` looks tokens up; `layer(hidden, reverse=True)` returns hidden @ E^T, the
    logits of a language model whose input and output embeddings are shared. Calling one
    layer twice keeps a single weight, so it is counted, saved and all-reduced once.
    """

    def __init__(self, vocab_size, width, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.width = vocab_size, width

    def build(self, input_shape):
        self.embeddings = self.add_weight(name="embeddings", shape=(self.vocab_size, self.width),
                                          initializer=_init())

    def call(self, inputs, reverse=False):
        if reverse:
            return ops.matmul(inputs, ops.transpose(ops.cast(self.embeddings, inputs.dtype)))
        ids = ops.cast(inputs, "int32")
        return ops.cast(ops.take(self.embeddings, ids, axis=0), self.compute_dtype)

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocab_size,)
        else:
            shape = tuple(inputs.shape) + (self.width,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "width": self.width}


@keras.saving.register_keras_serializable(package="models")
class PositionEmbedding(layers.Layer):
    """Adds a learned embedding of each position 0..length-1 (length <= max_length)."""

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.positions = self.add_weight(name="positions",
                                         shape=(self.max_length, input_shape[-1]),
                                         initializer=_init())

    def call(self, inputs):
        length = ops.shape(inputs)[1]
        return inputs + ops.cast(self.positions[:length], inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


def multi_head_attention(qkv, num_heads, causal):
    """Scaled dot-product attention on packed (batch, length, 3 * width) projections.

    Scores, mask and softmax are computed in float32 (16-bit softmax over long sequences
    loses precision and float16 overflows); the weighted sum runs in the compute dtype.
    """
    batch, length = ops.shape(qkv)[0], ops.shape(qkv)[1]
    width = qkv.shape[-1] // 3
    head_dim = width // num_heads
    qkv = ops.reshape(qkv, (batch, length, 3, num_heads, head_dim))
    query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    query = query * ops.cast(1.0 / math.sqrt(head_dim), query.dtype)
    scores = ops.cast(ops.einsum("bqhd,bkhd->bhqk", query, key), "float32")
    if causal:
        position = ops.arange(length)
        allowed = position[None, :] <= position[:, None]  # (query, key)
        scores = ops.where(allowed, scores, ops.cast(-1e9, "float32"))
    probs = ops.cast(ops.softmax(scores, axis=-1), value.dtype)
    out = ops.einsum("bhqk,bkhd->bqhd", probs, value)
    return ops.reshape(out, (batch, length, width))


@keras.saving.register_keras_serializable(package="models")
class TransformerBlock(CheckpointedBlock):
    """Pre-LayerNorm block: x + Attn(LN(x)), then x + MLP(LN(x)), GELU MLP.

    The two projections that write into the residual stream start with std
    0.02 / sqrt(2 * num_layers) (GPT-2), so the stream's variance does not grow with depth.
    """

    def __init__(self, width, num_heads, mlp_ratio=4.0, causal=False, dropout=0.0,
                 num_layers=1, **kwargs):
        super().__init__(**kwargs)
        self.width, self.num_heads, self.mlp_ratio = width, num_heads, mlp_ratio
        self.causal, self.dropout, self.num_layers = causal, dropout, num_layers
        self.hidden = int(width * mlp_ratio)
        residual_init = _init(_INIT_STD / math.sqrt(2 * num_layers))
        self.ln1 = layers.LayerNormalization(epsilon=1e-5, name="ln1")
        self.qkv = layers.Dense(3 * width, kernel_initializer=_init(), name="qkv")
        self.proj = layers.Dense(width, kernel_initializer=residual_init, name="attn_out")
        self.ln2 = layers.LayerNormalization(epsilon=1e-5, name="ln2")
        self.fc1 = layers.Dense(self.hidden, kernel_initializer=_init(), name="mlp_in")
        self.fc2 = layers.Dense(width, kernel_initializer=residual_init, name="mlp_out")
        self.drops = [layers.Dropout(dropout, name=f"dropout{i}") for i in (1, 2)] \
            if dropout > 0 else []

    def build(self, input_shape):
        shape = tuple(input_shape)
        for layer in (self.ln1, self.qkv, self.proj, self.ln2, self.fc1, *self.drops):
            layer.build(shape)
        self.fc2.build(shape[:-1] + (self.hidden,))

    def compute_output_shape(self, input_shape):
        return input_shape

    def _drop(self, x, index, training):
        return self.drops[index](x, training=training) if self.drops else x

    def forward(self, inputs, training=None):
        h = self.qkv(self.ln1(inputs))
        h = self.proj(multi_head_attention(h, self.num_heads, self.causal))
        x = inputs + self._drop(h, 0, training)
        h = ops.gelu(self.fc1(self.ln2(x)), approximate=True)
        return x + self._drop(self.fc2(h), 1, training)

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, num_heads=self.num_heads, mlp_ratio=self.mlp_ratio,
                      causal=self.causal, dropout=self.dropout, num_layers=self.num_layers)
        return config
