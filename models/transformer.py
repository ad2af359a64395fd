"""Transformer encoder classifier and decoder-only (causal) language model.

Pre-LayerNorm blocks, learned positional embeddings, GELU MLPs, float32 logits under any
mixed-precision policy. Inputs are int32 token ids of shape (batch, seq_len).

Sizes are keyword arguments: num_layers, num_heads, width, mlp_ratio, seq_len, vocab_size
(and num_classes for the classifier). Impossible combinations are rejected before any
layer is built. `decoder_lm_124m` is GPT-2 small's shape; with tied embeddings it has
GPT-2's 124,439,808 parameters.
"""
import keras
from keras import layers

from models.transformer_layers import PositionEmbedding, TokenEmbedding, TransformerBlock


def _check_int(name, what, value, minimum, fix):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: {what} must be an integer >= {minimum}; received "
                         f"{what}={value!r}. Fix: {fix}")


def _resolve_seq_len(name, seq_len, input_shape, default):
    """seq_len may come from seq_len= or from a trainer's input_shape=(seq_len,)."""
    from_shape = None
    if input_shape is not None:
        shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else (input_shape,)
        if len(shape) != 1:
            raise ValueError(
                f"{name}: input_shape must be (seq_len,) token ids; received {input_shape!r}. "
                f"Fix: pass input_shape=(seq_len,) or just seq_len=..., e.g. seq_len=256.")
        from_shape = shape[0]
    if seq_len is None:
        return default if from_shape is None else from_shape
    if from_shape is not None and from_shape != seq_len:
        raise ValueError(
            f"{name}: seq_len={seq_len!r} disagrees with input_shape={tuple(input_shape)!r}; "
            f"expected the same length in both. Fix: pass only one of them.")
    return seq_len


def validate_config(name, num_layers, num_heads, width, mlp_ratio, seq_len, vocab_size,
                    dropout):
    """Raises ValueError (what was received, what is expected, the fix) for bad sizes."""
    _check_int(name, "num_layers", num_layers, 1, "use at least one block, e.g. num_layers=4.")
    _check_int(name, "num_heads", num_heads, 1, "use e.g. num_heads=4.")
    _check_int(name, "width", width, 1, "use e.g. width=256.")
    _check_int(name, "seq_len", seq_len, 1, "use a positive sequence length, e.g. seq_len=256.")
    _check_int(name, "vocab_size", vocab_size, 2,
               "use the tokenizer's vocabulary size, e.g. vocab_size=256 for bytes.")
    if width % num_heads:
        lower = width - width % num_heads
        divisors = [h for h in range(1, min(width, 64) + 1) if width % h == 0]
        raise ValueError(
            f"{name}: width={width} is not divisible by num_heads={num_heads} (head size "
            f"would be {width / num_heads:g}); expected width to be a multiple of num_heads. "
            f"Fix: use width={lower or num_heads} or {lower + num_heads}, or num_heads in "
            f"{divisors}.")
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, (int, float)) \
            or int(width * mlp_ratio) < 1:
        raise ValueError(f"{name}: mlp_ratio must be a number > 0 with width * mlp_ratio >= 1; "
                         f"received mlp_ratio={mlp_ratio!r} (width={width}). "
                         f"Fix: use e.g. mlp_ratio=4.")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) \
            or not 0 <= dropout < 1:
        raise ValueError(f"{name}: dropout must be in [0, 1); received dropout={dropout!r}. "
                         f"Fix: use e.g. dropout=0.1, or 0 to disable it.")


def _trunk(tokens, cfg, causal, embedding):
    """Embeddings + blocks + final LayerNorm: (batch, seq) ids -> (batch, seq, width)."""
    x = embedding(tokens)
    x = PositionEmbedding(cfg["seq_len"], name="position_embedding")(x)
    if cfg["dropout"] > 0:
        x = layers.Dropout(cfg["dropout"], name="embedding_dropout")(x)
    for index in range(cfg["num_layers"]):
        x = TransformerBlock(cfg["width"], cfg["num_heads"], cfg["mlp_ratio"], causal=causal,
                             dropout=cfg["dropout"], num_layers=cfg["num_layers"],
                             gradient_checkpointing=cfg["gradient_checkpointing"],
                             name=f"block{index + 1}")(x)
    return layers.LayerNormalization(epsilon=1e-5, name="final_ln")(x)


def _config(name, num_layers, num_heads, width, mlp_ratio, seq_len, input_shape, vocab_size,
            dropout, gradient_checkpointing, default_seq_len):
    seq_len = _resolve_seq_len(name, seq_len, input_shape, default_seq_len)
    validate_config(name, num_layers, num_heads, width, mlp_ratio, seq_len, vocab_size, dropout)
    return dict(num_layers=num_layers, num_heads=num_heads, width=width, mlp_ratio=mlp_ratio,
                seq_len=seq_len, vocab_size=vocab_size, dropout=dropout,
                gradient_checkpointing=bool(gradient_checkpointing))


def transformer_classifier(*, num_layers=4, num_heads=4, width=256, mlp_ratio=4.0, seq_len=None,
                           vocab_size=256, num_classes=2, dropout=0.0, input_shape=None,
                           gradient_checkpointing=False, **_unused):
    """Encoder (bidirectional attention) over token ids, mean-pooled, then a linear head."""
    name = "transformer_classifier"
    cfg = _config(name, num_layers, num_heads, width, mlp_ratio, seq_len, input_shape,
                  vocab_size, dropout, gradient_checkpointing, default_seq_len=128)
    _check_int(name, "num_classes", num_classes, 1, "pass the number of labels.")
    tokens = keras.Input(shape=(cfg["seq_len"],), dtype="int32", name="tokens")
    embedding = TokenEmbedding(vocab_size, width, name="token_embedding")
    x = _trunk(tokens, cfg, causal=False, embedding=embedding)
    x = layers.GlobalAveragePooling1D(name="mean_pool")(x)
    x = layers.Dense(num_classes, name="logits_dense")(x)
    logits = layers.Activation("linear", dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name=name)


def _lm_vocab(name, vocab_size, num_classes, default):
    """A trainer may pass the label count as num_classes; for an LM that is the vocab."""
    if vocab_size is not None and num_classes is not None and vocab_size != num_classes:
        raise ValueError(f"{name}: vocab_size={vocab_size} and num_classes={num_classes} "
                         f"disagree; a language model predicts one class per token. "
                         f"Fix: pass only vocab_size.")
    return vocab_size if vocab_size is not None else (num_classes or default)


def decoder_lm(*, num_layers=4, num_heads=4, width=256, mlp_ratio=4.0, seq_len=None,
               vocab_size=None, num_classes=None, dropout=0.0, tie_embeddings=True,
               input_shape=None, gradient_checkpointing=False, name="decoder_lm",
               **_unused):
    """Causal LM: (batch, seq_len) ids -> (batch, seq_len, vocab_size) float32 logits.

    Position t sees tokens 0..t only; train it to predict token t+1. Defaults fit the
    byte-level corpus (vocab 256). tie_embeddings shares the input embedding with the
    output projection (GPT-2); otherwise the head is a separate bias-free Dense.
    """
    vocab_size = _lm_vocab(name, vocab_size, num_classes, default=256)
    cfg = _config(name, num_layers, num_heads, width, mlp_ratio, seq_len, input_shape,
                  vocab_size, dropout, gradient_checkpointing, default_seq_len=256)
    tokens = keras.Input(shape=(cfg["seq_len"],), dtype="int32", name="tokens")
    embedding = TokenEmbedding(vocab_size, width, name="token_embedding")
    x = _trunk(tokens, cfg, causal=True, embedding=embedding)
    if tie_embeddings:
        x = embedding(x, reverse=True)
    else:
        x = layers.Dense(vocab_size, use_bias=False, name="lm_head")(x)
    logits = layers.Activation("linear", dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name=name)


def decoder_lm_124m(**kwargs):
    """GPT-2 small's shape: 12 layers, 12 heads, width 768, 1024 tokens, vocab 50257."""
    defaults = dict(num_layers=12, num_heads=12, width=768, seq_len=1024, vocab_size=50257,
                    name="decoder_lm_124m")
    if kwargs.get("input_shape") is not None and "seq_len" not in kwargs:
        defaults.pop("seq_len")
    if kwargs.get("num_classes") is not None and "vocab_size" not in kwargs:
        defaults.pop("vocab_size")
    return decoder_lm(**{**defaults, **kwargs})
