"""Model descriptors are derived from architecture; check them against published totals."""
import pytest

import os
import subprocess
import sys

import models as trainer_zoo
from horovod_train.plan.errors import PlanError
from horovod_train.plan.models import (NOT_PLANNABLE, TRAINER_MODELS, canonical_name,
                                       get_model, known_models)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name, params", [
    # torchvision's published parameter counts (BN gamma/beta, fc with bias)
    ("resnet18", 11_689_512), ("resnet50", 25_557_032),
    ("resnet101", 44_549_160), ("resnet152", 60_192_808),
    # Hugging Face GPT-2 checkpoints (tied embeddings)
    ("gpt2-small", 124_439_808), ("gpt2-medium", 354_823_168),
    ("gpt2-large", 774_030_080), ("gpt2-xl", 1_557_611_200),
    # BERT with pre-training heads (MLM + NSP), ~110 M / ~336 M
    ("bert-base", 110_106_428), ("bert-large", 336_226_108),
    # models/small.py digits_cnn at width 32
    ("digits_cnn", 151_306),
])
def test_parameter_counts(name, params):
    assert get_model(name).params == params


@pytest.mark.parametrize("name, gmacs", [("resnet18", 1.81), ("resnet50", 4.09),
                                         ("resnet101", 7.80), ("resnet152", 11.51)])
def test_resnet_flops_match_published_multiply_adds(name, gmacs):
    # fwd+bwd = 3 x fwd = 3 x 2 x MACs
    assert get_model(name).flops_per_sample / 6e9 == pytest.approx(gmacs, rel=0.01)


def test_transformer_flops_follow_6_n_per_token():
    # Kaplan et al.: training costs ~6 N FLOPs per token (plus attention).
    m = get_model("gpt2-medium")
    per_token = m.flops_per_sample / 1024
    assert 6 * m.params * 0.9 < per_token < 6 * m.params * 1.4


def test_seq_len_scales_bert_and_is_rejected_for_cnns():
    short, long = get_model("bert-large", 128), get_model("bert-large", 512)
    assert long.act_elems_per_sample > 4 * short.act_elems_per_sample   # s^2 attention term
    assert long.params == short.params
    with pytest.raises(PlanError, match="seq_len"):
        get_model("resnet50", 128)
    with pytest.raises(PlanError, match="at most 512"):
        get_model("bert-base", 1024)


def test_custom_gpt_spec():
    m = get_model("gpt:layers=24,hidden=1024,heads=16,seq=1024")
    assert m.params == get_model("gpt2-medium").params
    assert get_model("gpt:layers=2,hidden=64,heads=2", seq_len=256).notes.endswith("seq=256 vocab=50257")
    for bad in ("gpt:layers=2", "gpt:layers=x,hidden=64,heads=2", "gpt:depth=2,hidden=8,heads=1"):
        with pytest.raises(PlanError):
            get_model(bad)


def test_unknown_model_lists_known_ones():
    with pytest.raises(PlanError) as err:
        get_model("resnet35")
    message = str(err.value)
    assert "resnet35" in message and "resnet50" in message and "Fix:" in message
    assert "\n" not in message
    assert "digits_cnn" in known_models()


def test_the_trainer_zoo_registry_is_read_without_tensorflow():
    code = ("import sys, models; names = models.available_models(); "
            "print(len(names), [m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[]")


def test_every_trainer_model_is_plannable_or_refused_by_name():
    zoo = set(trainer_zoo.available_models())
    assert zoo == set(TRAINER_MODELS) | set(NOT_PLANNABLE)
    assert not set(TRAINER_MODELS) & set(NOT_PLANNABLE)
    for name in TRAINER_MODELS:
        spec = get_model(name)
        assert spec.name == name and spec.params > 0 and name in known_models()


@pytest.mark.parametrize("trainer, planner", [("decoder_lm_124m", "gpt2-small"),
                                              ("resnet50", "resnet50")])
def test_trainer_names_share_the_planner_specs(trainer, planner):
    assert get_model(trainer).params == get_model(planner).params
    assert get_model(trainer).flops_per_sample == get_model(planner).flops_per_sample
    assert canonical_name(trainer) == canonical_name(planner)


@pytest.mark.parametrize("name, params", [
    # torchvision's resnet34; the CIFAR variants: 3x3/1 stem, no max-pool, 10 classes
    ("resnet34", 21_797_672), ("resnet18_cifar", 11_173_962),
    # models/small.py digits_mlp at width 128; the byte-level decoders with tied
    # embeddings (models/transformer.py defaults: 4 x 256 wide, seq 256, vocab 256)
    ("digits_mlp", 26_122), ("decoder_lm_small", 0), ("decoder_lm", 0),
])
def test_trainer_only_models(name, params):
    spec = get_model(name)
    if params:
        assert spec.params == params
    else:
        assert 0.1e6 < spec.params < 5e6


def test_a_trainer_model_the_planner_cannot_plan_is_named_with_the_plannable_ones():
    name = next(iter(NOT_PLANNABLE))
    with pytest.raises(PlanError) as err:
        get_model(name)
    message = str(err.value)
    assert name in message and "decoder_lm_124m" in message and "Fix:" in message
    assert "\n" not in message
