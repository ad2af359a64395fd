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

from horovod_train.plan.errors import PlanError, plan_error, unknown_name

IMAGENET_TRAIN = 1_281_167   # ILSVRC-2012 training images
DIGITS_SAMPLES = 1_797       # scikit-learn's bundled 8x8 digits
CIFAR10_TRAIN = 50_000


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


def _resnet(depth: int, small_input: bool = False) -> ModelSpec:
    blocks, bottleneck = {18: ([2, 2, 2, 2], False), 34: ([3, 4, 6, 3], False),
                          50: ([3, 4, 6, 3], True), 101: ([3, 4, 23, 3], True),
                          152: ([3, 8, 36, 3], True)}[depth]
    size, classes = (32, 10) if small_input else (224, 1000)
    t = _Tally(acts=size * size * 3)
    if small_input:                             # models/resnet.py: 3x3/1 stem, no max pool
        hw = _conv_bn(t, size, 3, 64, 3, 1)
    else:
        hw = _conv_bn(t, size, 3, 64, 7, 2)
        hw = math.ceil(hw / 2)                  # 3x3/2 max pool
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
    t.params += cin * classes + classes           # fc to the classes
    t.macs += cin * classes
    if small_input:
        return ModelSpec(f"resnet{depth}_cifar", t.params, 3 * 2 * t.macs, t.acts, classes,
                         layers=depth, ops_per_step=3 * (t.ops + 2), optimizer="momentum",
                         dataset_size=CIFAR10_TRAIN, sample_unit="images",
                         notes="32x32 CIFAR-10, 3x3/1 stem")
    return ModelSpec(f"resnet{depth}", t.params, 3 * 2 * t.macs, t.acts, classes,
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


def _digits_mlp() -> ModelSpec:
    """models/small.py:digits_mlp (width 128): flatten, two ReLU layers, logits."""
    params = (64 * 128 + 128) + (128 * 128 + 128) + (128 * 10 + 10)
    macs = 64 * 128 + 128 * 128 + 128 * 10
    return ModelSpec("digits_mlp", params, 3 * 2 * macs, 64 + 2 * 2 * 128, 10, layers=3,
                     ops_per_step=24, optimizer="adam", dataset_size=DIGITS_SAMPLES,
                     sample_unit="images", notes="8x8x1 digits, 10 classes")


_BERT = {"bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}
_GPT = {"gpt2-small": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
        "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}
_RESNETS = {"resnet18": 18, "resnet34": 34, "resnet50": 50, "resnet101": 101, "resnet152": 152}
_CIFAR_RESNETS = {"resnet18_cifar": 18, "resnet34_cifar": 34, "resnet50_cifar": 50}
_SMALL = {"digits_cnn": _digits_cnn, "digits_mlp": _digits_mlp}
_CUSTOM_GPT = "gpt:layers=L,hidden=H,heads=A[,seq=S,vocab=V]"

# The one map from the trainer's zoo (models/__init__.py's registry) to planner specs:
# every trainer name the planner can plan, with the builder's default sizes (the
# byte-level decoders: models/transformer.py decoder_lm and models/small_lm.py).
# tests/unit/test_plan_models.py checks it covers the registry with NOT_PLANNABLE.
TRAINER_MODELS = {
    **{name: name for name in (*_RESNETS, *_CIFAR_RESNETS, *_SMALL)},
    "decoder_lm_124m": "gpt2-small",
    "decoder_lm": "gpt:layers=4,hidden=256,heads=4,seq=256,vocab=256",
    "decoder_lm_small": "gpt:layers=2,hidden=128,heads=4,seq=256,vocab=256",
}
# Trainer models without a descriptor, and why.
NOT_PLANNABLE = {
    "transformer_classifier": "an encoder with a classification head; the planner's "
                              "encoders are BERT with its pre-training heads",
}


def trainer_verdict(name: str) -> str:
    """Whether `horovod_train train` can train the model the planner plans, and as what:
    the planner also knows models the trainer's zoo does not have (BERT, GPT-2 medium...)."""
    as_trainer = [t for t, spec in TRAINER_MODELS.items() if name in (t, spec)]
    if as_trainer:
        return f"trainer: horovod_train train --model {as_trainer[0]} trains it"
    return (f"trainer: cannot train {name}, which is not in its zoo (planned for comparison "
            "or your own script; its models: " + ", ".join(sorted(TRAINER_MODELS)) + ")")


def known_models() -> list[str]:
    return sorted({*_RESNETS, *_CIFAR_RESNETS, *_SMALL, *_BERT, *_GPT, *TRAINER_MODELS,
                   _CUSTOM_GPT})


def canonical_name(name: str) -> str:
    """The planner spec a (trainer or planner) model name stands for."""
    return TRAINER_MODELS.get(name, name)


def default_seq_len(name: str) -> int | None:
    name = canonical_name(name)
    if name in _BERT:
        return 128
    if name in _GPT or name.startswith("gpt:"):
        return 1024
    return None


def get_model(name: str, seq_len: int | None = None) -> ModelSpec:
    """Descriptor for `name` (a planner or trainer name); seq_len: transformers only."""
    spec = canonical_name(name)
    if spec != name:                    # a trainer name: its spec, under the trainer's name
        model = get_model(spec, seq_len)
        return dataclasses.replace(model, name=name, notes=f"{model.notes}; planned as {spec}"
                                   if spec in _GPT else model.notes)
    if seq_len is not None and default_seq_len(name) is None and name in (
            *_RESNETS, *_CIFAR_RESNETS, *_SMALL):
        raise plan_error("--seq_len", seq_len, f"no --seq_len for {name} (not a transformer)",
                         "drop --seq_len")
    if name in _RESNETS:
        return _resnet(_RESNETS[name])
    if name in _CIFAR_RESNETS:
        return _resnet(_CIFAR_RESNETS[name], small_input=True)
    if name in _SMALL:
        return _SMALL[name]()
    if name in _BERT:
        layers, hidden, heads = _BERT[name]
        return _transformer(name, layers, hidden, heads, 30522, 512, seq_len or 128, True)
    if name in _GPT:
        layers, hidden, heads = _GPT[name]
        return _transformer(name, layers, hidden, heads, 50257, 1024, seq_len or 1024, False)
    if name.startswith("gpt:"):
        return _custom_gpt(name, seq_len)
    if name in NOT_PLANNABLE or name in _trainer_zoo():
        raise _not_plannable(name)
    raise unknown_name("--model", name, known_models(), "--model")


def _trainer_zoo() -> list[str]:
    import models                       # the trainer's registry; importing it loads no TF
    return models.available_models()


def _not_plannable(name: str) -> PlanError:
    why = NOT_PLANNABLE.get(name, "no planner descriptor yet")
    plannable = ", ".join(sorted(TRAINER_MODELS))
    return PlanError(f"--model: received the trainer's {name!r}, which the planner cannot "
                     f"plan ({why}); expected a plannable model, of the trainer's: "
                     f"{plannable}. Fix: pass --model with one of those, or describe a "
                     f"decoder as --model {_CUSTOM_GPT}")


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
