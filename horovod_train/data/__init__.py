"""Input data: sources, sharding and tf.data pipelines.

Like the model registry, names map to "module:function" so that validating
--dataset imports no TensorFlow. A source function takes the DataConfig and returns
a *source*: an object with exactly the members the training loop uses -
num_train_examples (identical on every rank), input_shape, num_classes,
train_dataset(shard, batch_size, seed, epoch, threads=0) and
eval_dataset(shard, batch_size). A source that can build many epochs lazily, as one
dataset whose memory does not grow with their count, also offers
train_epochs(shard, batch_size, seed, first, stop, threads=0); the loop then reads
the whole run from one iterator (pipeline.epoch_batches). See docs/data.md for the
sharding rules.
"""
import importlib

_SOURCES = {
    "digits": "horovod_train.data.sources:load_digits",
    "synthetic": "horovod_train.data.sources:load_synthetic",
    "tfrecord": "horovod_train.data.tfrecord:load",
    "lmdb": "horovod_train.data.lmdb_source:load",
    "tfds": "horovod_train.data.tfds_source:load",
    "pycorpus": "horovod_train.data.pycorpus:load",
}


def available_datasets() -> list[str]:
    return sorted(_SOURCES)


def load(data_config, peers=None):
    """The source of --dataset. `peers` (the backend's Communicator, None alone) lets
    a source that verifies files split that work across the ranks (tfrecord)."""
    module_name, fn_name = _SOURCES[data_config.dataset].split(":")
    return getattr(importlib.import_module(module_name), fn_name)(data_config, peers=peers)
