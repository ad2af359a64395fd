"""The model zoo: builds, shapes, one training step, exact counts, checkpointing, bad input."""
import numpy as np
import pytest

import models


tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from models.resnet import ResidualBlock  # noqa: E402  (after the importorskip)
from models.transformer_layers import TransformerBlock  # noqa: E402

TINY_LM = dict(num_layers=2, num_heads=4, width=32, seq_len=16, vocab_size=50)
TINY_CLS = dict(num_layers=2, num_heads=2, width=16, seq_len=12, vocab_size=30, num_classes=3)


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


def _batch(name, kwargs, batch=2):
    """A (model, inputs, integer labels) triple for one small training step."""
    rng = np.random.RandomState(0)
    model = models.get_model(name, **kwargs)
    shape = tuple(model.inputs[0].shape[1:])
    if name in ("decoder_lm", "transformer_classifier"):
        vocab = kwargs["vocab_size"]
        x = rng.randint(0, vocab, (batch,) + shape).astype("int32")
        y = x if name == "decoder_lm" else rng.randint(0, kwargs["num_classes"], (batch,))
    else:
        x = rng.randn(batch, *shape).astype("float32")
        y = rng.randint(0, model.outputs[0].shape[-1], (batch,))
    return model, x, y


def _loss_and_grads(model, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            y, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    # Embedding lookups give IndexedSlices; densify so every gradient compares alike.
    return loss, logits, [tf.convert_to_tensor(g) for g in grads]


def test_registry_lists_every_family():
    names = models.available_models()
    for name in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet18_cifar",
                 "transformer_classifier", "decoder_lm", "digits_cnn"):
        assert name in names


def test_unknown_name_lists_available_models():
    with pytest.raises(ValueError) as err:
        models.get_model("resnet51")
    message = str(err.value)
    assert "'resnet51'" in message and "resnet50" in message and "decoder_lm" in message


@pytest.mark.parametrize("name,kwargs,out_shape", [
    ("resnet18_cifar", {}, (10,)),
    ("resnet50", dict(input_shape=(64, 64, 3), num_classes=7), (7,)),
    ("transformer_classifier", TINY_CLS, (3,)),
    ("decoder_lm", TINY_LM, (16, 50)),
    ("digits_cnn", {}, (10,)),
])
def test_builds_and_takes_a_training_step(name, kwargs, out_shape):
    model, x, y = _batch(name, dict(kwargs, unknown_trainer_flag=1))  # extra kwargs ignored
    optimizer = keras.optimizers.SGD(0.01)
    before = [v.numpy() for v in model.trainable_variables]
    loss, logits, grads = _loss_and_grads(model, x, y)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert tuple(logits.shape) == (2,) + out_shape
    assert logits.dtype == tf.float32
    assert np.isfinite(loss.numpy())
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads)
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    assert any(changed)


@pytest.mark.parametrize("name,expected", [
    ("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032),
    ("resnet101", 44_549_160), ("resnet152", 60_192_808),
    ("resnet18_cifar", 11_173_962),
])
def test_resnet_parameter_counts_match_references(name, expected):
    model = models.get_model(name)
    assert _count(model.trainable_weights) == expected
    assert model.outputs[0].shape[-1] == (10 if name.endswith("_cifar") else 1000)


def _gpt_params(vocab, seq_len, width, layers, mlp=4):
    block = 2 * (2 * width) + (3 * width * width + 3 * width) + (width * width + width) \
        + (width * mlp * width + mlp * width) + (mlp * width * width + width)
    return vocab * width + seq_len * width + layers * block + 2 * width


def test_decoder_lm_parameter_count_follows_gpt2_layout():
    # GPT-2 small (tied embeddings) has 124,439,808 parameters; the model has its layout.
    assert _gpt_params(50257, 1024, 768, 12) == 124_439_808
    model = models.get_model("decoder_lm", **TINY_LM)
    assert model.count_params() == _gpt_params(50, 16, 32, 2)
    untied = models.get_model("decoder_lm", tie_embeddings=False, **TINY_LM)
    assert untied.count_params() == _gpt_params(50, 16, 32, 2) + 50 * 32


def _twin_models(name, kwargs):
    """The same model with and without checkpointing, with identical variables."""
    plain = models.get_model(name, **kwargs)
    remat = models.get_model(name, gradient_checkpointing=True, **kwargs)
    def layout(model):  # seed generators get globally unique names; compare the rest
        return [(v.path if "seed_generator" not in v.path else "seed", v.shape)
                for v in model.variables]

    assert layout(plain) == layout(remat)
    for source, target in zip(plain.variables, remat.variables):
        target.assign(source)  # weights, BN statistics and dropout seeds alike
    return plain, remat


@pytest.mark.parametrize("name,kwargs,compiled,policy", [
    ("resnet18_cifar", dict(input_shape=(16, 16, 3)), False, "float32"),
    ("decoder_lm", dict(TINY_LM, dropout=0.3), True, "float32"),
    ("transformer_classifier", dict(TINY_CLS, dropout=0.2), False, "mixed_bfloat16"),
])
def test_gradient_checkpointing_matches_plain_gradients(name, kwargs, compiled, policy):
    keras.mixed_precision.set_global_policy(policy)
    plain, remat = _twin_models(name, kwargs)
    _, x, y = _batch(name, kwargs, batch=3)
    results = []
    for model in (plain, remat):
        step = tf.function(_loss_and_grads) if compiled else _loss_and_grads
        loss, logits, grads = step(model, x, y)
        state = [v.numpy() for v in model.non_trainable_variables]
        results.append((loss.numpy(), [g.numpy() for g in grads], state))
    (loss_a, grads_a, state_a), (loss_b, grads_b, state_b) = results
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
    for a, b in zip(grads_a, grads_b):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # BN moving statistics updated once (not twice), dropout seeds advanced once.
    for a, b in zip(state_a, state_b):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("block_cls,name,kwargs", [
    (ResidualBlock, "resnet18_cifar", dict(input_shape=(8, 8, 3))),
    (TransformerBlock, "decoder_lm", TINY_LM),
])
def test_checkpointing_recomputes_each_block_in_backward(monkeypatch, block_cls, name, kwargs):
    calls = []
    original = block_cls.forward

    def counting(self, *args, **kw):
        calls.append(self.name)
        return original(self, *args, **kw)

    monkeypatch.setattr(block_cls, "forward", counting)
    counts = []
    for gc in (False, True):
        model, x, y = _batch(name, dict(kwargs, gradient_checkpointing=gc))
        blocks = [layer for layer in model.layers if isinstance(layer, block_cls)]
        calls.clear()
        _loss_and_grads(model, x, y)
        counts.append(len(calls) / len(blocks))
    assert counts == [1, 2]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("name,kwargs", [
    ("resnet18_cifar", dict(input_shape=(8, 8, 3))),
    ("transformer_classifier", TINY_CLS),
    ("decoder_lm", TINY_LM),
])
def test_mixed_precision_logits_are_float32(policy, name, kwargs):
    keras.mixed_precision.set_global_policy(policy)
    model, x, y = _batch(name, dict(kwargs, gradient_checkpointing=True))
    assert model.outputs[0].dtype == "float32"
    loss, logits, grads = _loss_and_grads(model, x, y)
    assert logits.dtype == tf.float32 and np.isfinite(loss.numpy())
    assert all(g.dtype == tf.float32 for g in grads)  # variables stay float32


def test_saved_model_round_trip_keeps_checkpointing(tmp_path):
    model, x, _ = _batch("decoder_lm", dict(TINY_LM, gradient_checkpointing=True))
    path = str(tmp_path / "lm.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(model(x).numpy(), loaded(x).numpy(), rtol=1e-6)
    assert all(b.gradient_checkpointing for b in loaded.layers
               if isinstance(b, TransformerBlock))


def _message(name, **kwargs):
    with pytest.raises(ValueError) as err:
        models.get_model(name, **kwargs)
    return str(err.value)


def test_image_smaller_than_stride_is_rejected_with_a_fix():
    message = _message("resnet50", input_shape=(16, 16, 3))
    assert "(16, 16, 3)" in message and "32" in message and "resnet18_cifar" in message
    assert "Fix" in message
    assert "stride 8" in _message("resnet18_cifar", input_shape=(4, 32, 3))
    assert "(height, width, channels)" in _message("resnet18", input_shape=(224, 224))


@pytest.mark.parametrize("name,kwargs,expected", [
    ("decoder_lm", dict(width=250, num_heads=4), ["width=250", "num_heads=4", "62.5",
                                                  "width=248 or 252"]),
    ("transformer_classifier", dict(seq_len=0), ["seq_len=0", ">= 1", "Fix"]),
    ("decoder_lm", dict(num_layers=0), ["num_layers=0", "Fix"]),
    ("decoder_lm", dict(dropout=1.0), ["dropout=1.0", "[0, 1)"]),
    ("decoder_lm", dict(vocab_size=256, num_classes=10), ["vocab_size=256", "num_classes=10"]),
    ("decoder_lm", dict(seq_len=64, input_shape=(32,)), ["seq_len=64", "(32,)"]),
    ("transformer_classifier", dict(input_shape=(8, 8, 1)), ["(seq_len,)", "(8, 8, 1)"]),
    ("resnet18", dict(num_classes=0), ["num_classes", "0"]),
])
def test_impossible_shapes_are_rejected_before_building(name, kwargs, expected):
    message = _message(name, **kwargs)
    for fragment in expected:
        assert fragment in message
