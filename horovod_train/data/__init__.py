"""Input data: sources, sharding and tf.data pipelines.

Like the model registry, names map to "module:function" so that validating
--dataset imports no TensorFlow. A source function takes the DataConfig and
returns an ArrayData (in-memory sets) - the input pipelines in pipeline.py turn
that into per-rank tf.data datasets.
"""
import importlib

_SOURCES = {
    "digits": "horovod_train.data.sources:load_digits",
    "synthetic": "horovod_train.data.sources:load_synthetic",
}


def available_datasets() -> list[str]:
    return sorted(_SOURCES)


def load(data_config):
    module_name, fn_name = _SOURCES[data_config.dataset].split(":")
    return getattr(importlib.import_module(module_name), fn_name)(data_config)
