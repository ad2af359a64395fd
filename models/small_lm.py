"""A small decoder LM sized for a few CPU minutes: the case study in miniature.

The trainer passes only input_shape=(seq_len,), num_classes (the vocabulary) and
gradient_checkpointing, so the sizes live here: 2 pre-LayerNorm blocks of width 128
with 4 heads (about 0.4M parameters with the byte vocabulary and tied embeddings).
On two shared CPU cores it takes a byte-level model on the pycorpus dataset from
ln 256 = 5.55 nats to well under 3 in a few hundred steps (README: "A language model on Python's own sources"). Any size can
still be passed as a keyword, as for models.transformer.decoder_lm.
"""
from models.transformer import decoder_lm

SMALL = dict(num_layers=2, num_heads=4, width=128, mlp_ratio=4.0)


def decoder_lm_small(**kwargs):
    return decoder_lm(**{**SMALL, "name": "decoder_lm_small", **kwargs})
