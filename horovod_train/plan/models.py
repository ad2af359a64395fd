"""Model descriptors: the few numbers the cost model needs, derived from architecture.

Counts are computed by walking each architecture rather than typed in, so resnet18 /
101 / 152 and every transformer size come from the same code. Conventions:

- params: trainable parameters (what the allreduce carries). Checked in the tests
  against the published totals (torchvision ResNets, BERT, GPT-2).
- flops_per_sample: forward + backward = 3 x forward, forward = 2 x multiply-adds of
  convolutions and matmuls. Backward costs two forwards (gradient w.r.t. inputs and
  w.r.t. weights): Kaplan et al., arXiv:2001.08361, sec. 2.1.
- act_elems_per_sample: elements kept from forward for backward, stored at the
  working precision (2 bytes mixed, 4 bytes fp32/tf32); fp32_act_elems_per_sample:
  those always kept in fp32 (our models emit float32 logits).
- ops_per_step: GPU kernels per micro-batch (forward + backward), for launch overhead.
"""
from __future__ import annotations

import dataclasses
import math

from horovod_train.plan.errors import plan_error, unknown_name

IMAGENET_TRAIN = 1_281_167   # ILSVRC-2012 training images
DIGITS_SAMPLES = 1_797       # scikit-learn's bundled 8x8 digits


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    params: int
    flops_per_sample: float
    act_elems_per_sample: float
    fp32_act_elems_per_sample: float
    layers: int
    ops_per_step: int
    optimizer: str
    dataset_size: int | None
    sample_unit: str
    notes: str = ""


# --- ResNet (He et al., arXiv:1512.03385; v1.5 = stride on the 3x3 conv, as in
# NVIDIA's and torchvision's implementations) -------------------------------------

@dataclasses.dataclass
class _Tally:
    params: int = 0
    macs: int = 0
    acts: int = 0
    ops: int = 0


def _conv_bn(t: _Tally, hw: int, cin: int, cout: int, k: int, stride: int) -> int:
    """Adds conv (no bias) + BatchNorm; returns the output spatial size."""
    out = math.ceil(hw / stride)
    t.params += k * k * cin * cout + 2 * cout       # BN gamma, beta (moving stats are not trained)
    t.macs += out * out * k * k * cin * cout
    # cuDNN/XLA fuse BN+ReLU, so two tensors per conv survive to backward: the conv
    # output (BN's input) and the BN/ReLU output (the next conv's input). This count
    # reproduces NVIDIA's batch limits: RN50 at 256/GPU fits 16 GB in AMP, at 128
    # (not 256) in FP32 (DeepLearningExamples RN50 v1.5 TF README).
    t.acts += 2 * out * out * cout
    t.ops += 3
    return out


def _resnet(depth: int) -> ModelSpec:
    blocks, bottleneck = {18: ([2, 2, 2, 2], False), 50: ([3, 4, 6, 3], True),
                          101: ([3, 4, 23, 3], True), 152: ([3, 8, 36, 3], True)}[depth]
    t = _Tally(acts=224 * 224 * 3)
    hw = _conv_bn(t, 224, 3, 64, 7, 2)
    hw = math.ceil(hw / 2)                      # 3x3/2 max pool
    t.acts += hw * hw * 64
    cin = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        cout = width * 4 if bottleneck else width
        for b in range(count):
            stride = 2 if (b == 0 and stage > 0) else 1
            if bottleneck:
                _conv_bn(t, hw, cin, width, 1, 1)
                out = _conv_bn(t, hw, width, width, 3, stride)
                _conv_bn(t, out, width, cout, 1, 1)
            else:
                out = _conv_bn(t, hw, cin, width, 3, stride)
                _conv_bn(t, out, width, width, 3, 1)
            if stride != 1 or cin != cout:
                _conv_bn(t, hw, cin, cout, 1, stride)
            t.acts += out * out * cout            # residual add + ReLU output
            t.ops += 1
            hw, cin = out, cout
    t.params += cin * 1000 + 1000                 # fc to 1000 ImageNet classes
    t.macs += cin * 1000
    return ModelSpec(f"resnet{depth}", t.params, 3 * 2 * t.macs, t.acts, 1000,
                     layers=depth, ops_per_step=3 * (t.ops + 3), optimizer="momentum",
                     dataset_size=IMAGENET_TRAIN, sample_unit="images",
                     notes="224x224 ImageNet, v1.5")


# --- Transformers -----------------------------------------------------------------

def _transformer(name: str, layers: int, hidden: int, heads: int, vocab: int,
                 positions: int, seq: int, encoder: bool) -> ModelSpec:
    if seq > positions:
        raise plan_error("--seq_len", seq, f"at most {positions} for {name}",
                         f"pass --seq_len {positions} or less")
    h, s = hidden, seq
    per_layer = 12 * h * h + 13 * h               # QKV+proj (4h^2+4h), MLP 4h (8h^2+5h), 2 LayerNorms
    params = layers * per_layer + (vocab + positions) * h + 2 * h
    if encoder:
        # BERT: token-type embeddings, pooler, MLM transform + LayerNorm + output
        # bias (decoder weights tied to the embedding), next-sentence head.
        params += 2 * h + (h * h + h) + (h * h + h) + 2 * h + vocab + (2 * h + 2)
        predicted = max(1, round(s * 5 / 32))   # NVIDIA's max_predictions_per_seq: 20 @128, 80 @512
    else:
        predicted = s                             # a decoder predicts every position
    fwd = (2 * s * layers * 12 * h * h            # the four matmuls of each layer
           + 4 * layers * s * s * h               # QK^T and attention x V
           + 2 * predicted * h * vocab)           # vocabulary projection
    # Korthikanti et al., arXiv:2205.05198, eq. (1): 34*s*h + 5*a*s^2 bytes per layer
    # per sequence with 16-bit activations and 1-byte dropout masks; halved to elements.
    acts = layers * (34 * s * h + 5 * heads * s * s) / 2 + s * h
    kind = "encoder" if encoder else "decoder"
    return ModelSpec(name, params, 3.0 * fwd, acts, predicted * vocab, layers=layers,
                     ops_per_step=3 * 16 * layers + 30,
                     optimizer="lamb" if encoder else "adam", dataset_size=None,
                     sample_unit="sequences",
                     notes=f"{kind}, L={layers} h={h} heads={heads} seq={s} vocab={vocab}")


def _digits_cnn() -> ModelSpec:
    """models/small.py:digits_cnn (width 32) on 8x8x1 digits."""
    params = (9 * 32 + 32) + (9 * 32 * 64 + 64) + (1024 * 128 + 128) + (128 * 10 + 10)
    macs = 64 * 9 * 32 + 64 * 9 * 32 * 64 + 1024 * 128 + 128 * 10
    acts = 64 + 2 * 2048 + 2 * 4096 + 1024 + 2 * 128
    return ModelSpec("digits_cnn", params, 3 * 2 * macs, acts, 10, layers=4,
                     ops_per_step=36, optimizer="adam", dataset_size=DIGITS_SAMPLES,
                     sample_unit="images", notes="8x8x1 digits, 10 classes")


_BERT = {"bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}
_GPT = {"gpt2-small": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
        "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}
_RESNETS = {"resnet18": 18, "resnet50": 50, "resnet101": 101, "resnet152": 152}
_CUSTOM_GPT = "gpt:layers=L,hidden=H,heads=A[,seq=S,vocab=V]"


def known_models() -> list[str]:
    return sorted([*_RESNETS, *_BERT, *_GPT, "digits_cnn", _CUSTOM_GPT])


def default_seq_len(name: str) -> int | None:
    if name in _BERT:
        return 128
    if name in _GPT or name.startswith("gpt:"):
        return 1024
    return None


def get_model(name: str, seq_len: int | None = None) -> ModelSpec:
    """Descriptor for `name`; seq_len applies to transformers only."""
    if seq_len is not None and default_seq_len(name) is None and name in (*_RESNETS, "digits_cnn"):
        raise plan_error("--seq_len", seq_len, f"no --seq_len for {name} (not a transformer)",
                         "drop --seq_len")
    if name in _RESNETS:
        return _resnet(_RESNETS[name])
    if name == "digits_cnn":
        return _digits_cnn()
    if name in _BERT:
        layers, hidden, heads = _BERT[name]
        return _transformer(name, layers, hidden, heads, 30522, 512, seq_len or 128, True)
    if name in _GPT:
        layers, hidden, heads = _GPT[name]
        return _transformer(name, layers, hidden, heads, 50257, 1024, seq_len or 1024, False)
    if name.startswith("gpt:"):
        return _custom_gpt(name, seq_len)
    raise unknown_name("--model", name, known_models(), "--model")


def _custom_gpt(spec: str, seq_len: int | None) -> ModelSpec:
    fields = {}
    for part in spec[4:].split(","):
        key, _, value = part.partition("=")
        if key not in ("layers", "hidden", "heads", "seq", "vocab") or not value.isdigit() \
                or int(value) <= 0:
            raise plan_error("--model", spec, _CUSTOM_GPT + " with positive integers",
                             "e.g. --model gpt:layers=24,hidden=2048,heads=16,seq=2048")
        fields[key] = int(value)
    missing = {"layers", "hidden", "heads"} - set(fields)
    if missing:
        raise plan_error("--model", spec, _CUSTOM_GPT, f"add {', '.join(sorted(missing))}")
    seq = seq_len or fields.get("seq", 1024)
    return _transformer(spec, fields["layers"], fields["hidden"], fields["heads"],
                        fields.get("vocab", 50257), max(seq, fields.get("seq", 1024)),
                        seq, encoder=False)
