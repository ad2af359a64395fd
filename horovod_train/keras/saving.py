"""hvd.load_model: a saved Keras model back, its optimizer wrapped for the job.

A model saved with our DistributedOptimizer comes back with it (the class is registered
with Keras's serialization). One saved with a plain optimizer, by any script, comes back
with that optimizer (and its state) inside a DistributedOptimizer, as Horovod's
load_model does, so model.fit goes on reducing gradients over ranks.
"""
import keras

from horovod_train.errors import UsageError
from horovod_train.keras import compression as comp
from horovod_train.keras.optimizer import DistributedOptimizer


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=comp.Compression.none, legacy_opts=False):
    if legacy_opts:
        raise UsageError("load_model: received legacy_opts=True; expected Keras 3 optimizers "
                         "(Keras 3 has no keras.optimizers.legacy). Fix: drop legacy_opts")
    objects = {"DistributedOptimizer": DistributedOptimizer}
    objects.update({cls.__name__: cls for cls in custom_optimizers or []})
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    opt = getattr(model, "optimizer", None)
    if opt is not None and not isinstance(opt, DistributedOptimizer):
        # fit builds its train function from model.optimizer when it first runs.
        model.optimizer = DistributedOptimizer(opt, compression=compression)
        model.train_function = None
    return model
