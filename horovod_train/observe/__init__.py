"""Where the time goes: the chief's records of a run (docs/observability.md).

`create` returns the chief's Observer, or its no-op twin on every other rank, so the
loop calls the same hooks everywhere and never branches on the rank. Nothing here
imports TensorFlow at import time: the report and the unit tests stay TF-free.
"""
from horovod_train.observe.observer import ChiefObserver, NullObserver, create

__all__ = ["ChiefObserver", "NullObserver", "create"]
