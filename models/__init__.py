"""Model zoo: plain Keras 3 models that know nothing of distribution.

The registry maps a name to "module:function" so that listing and validating names
imports no TensorFlow; the builder's module is imported only by get_model().
Every builder takes keyword arguments only and returns an unbuilt-or-built
keras.Model whose outputs are float32 logits (so mixed precision is safe).
"""
import importlib

# name -> "module:function". Add new families here.
_REGISTRY = {
    "digits_cnn": "models.small:digits_cnn",
    "digits_mlp": "models.small:digits_mlp",
    "resnet18": "models.resnet:resnet18",
    "resnet34": "models.resnet:resnet34",
    "resnet50": "models.resnet:resnet50",
    "resnet101": "models.resnet:resnet101",
    "resnet152": "models.resnet:resnet152",
    "resnet18_cifar": "models.resnet:resnet18_cifar",
    "resnet34_cifar": "models.resnet:resnet34_cifar",
    "resnet50_cifar": "models.resnet:resnet50_cifar",
    "transformer_classifier": "models.transformer:transformer_classifier",
    "decoder_lm": "models.transformer:decoder_lm",
    "decoder_lm_124m": "models.transformer:decoder_lm_124m",
    "decoder_lm_small": "models.small_lm:decoder_lm_small",
}


def available_models() -> list[str]:
    return sorted(_REGISTRY)


def get_model(name: str, **kwargs):
    """Builds model `name`; kwargs are the builder's (input_shape, num_classes, ...)."""
    if name not in _REGISTRY:
        listed = ", ".join(available_models())
        raise ValueError(f"unknown model {name!r}; available models: {listed}. "
                         f"Fix: pass one of those names.")
    module_name, fn_name = _REGISTRY[name].split(":")
    builder = getattr(importlib.import_module(module_name), fn_name)
    return builder(**kwargs)
