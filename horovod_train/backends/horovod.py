"""Horovod ring-allreduce through horovod.tensorflow's core collectives.

We deliberately do not use horovod.tensorflow.keras: under Keras 3 its
DistributedOptimizer leaves ranks silently diverged and its broadcast callback
fails ("'Variable' object has no attribute 'ref'"). Keras 3 variables wrap a
tf.Variable (`v.value`); every collective here acts on that.
"""
import os

from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.errors import UsageError

# Chosen when ranks share a CPU host's cores (see _cpu_sharing_defaults).
CPU_SHARING_DEFAULTS = {
    # Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms; at the 1 ms
    # default it steals cycles from ranks that share cores.
    "HOROVOD_CYCLE_TIME": "5",
    # Open MPI busy-polls while waiting; yielding gives the core back to the
    # neighbouring rank. Read at MPI_Init, i.e. inside hvd.init().
    "OMPI_MCA_mpi_yield_when_idle": "1",
}


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as err:
        raise UsageError(f"--backend=horovod: Horovod is not importable ({err}); expected "
                         f"horovod built with TensorFlow support. Fix: run 'make setup', "
                         f"or pass --backend=local (one process) or --backend=mwms") from err
    return hvd


def _cpu_sharing_defaults(local_size: int) -> dict:
    """The env defaults we set for several CPU ranks on one host; the user's win."""
    if local_size < 2 or os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1"):
        return {}
    return {k: v for k, v in CPU_SHARING_DEFAULTS.items() if k not in os.environ}


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, **_options):
        super().__init__()
        self._hvd = _import_horovod()
        self.chosen_env = {}

    def setup(self) -> ProcessInfo:
        from horovod_train.env import launch_info
        self.chosen_env = _cpu_sharing_defaults(launch_info().local_size)
        os.environ.update(self.chosen_env)
        hvd = self._hvd
        hvd.init()
        self.info = ProcessInfo(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
        return self.info

    def allreduce_gradients(self, grads):
        # One grouped call: Horovod fuses the whole group into as few ring passes as
        # the fusion buffer allows, and every rank submits them in the same order.
        return self._hvd.grouped_allreduce(list(grads), op=self._hvd.Average)

    def allreduce_mean(self, value):
        return self._hvd.allreduce(value, op=self._hvd.Average)

    def broadcast_variables(self, variables):
        self._hvd.broadcast_variables([getattr(v, "value", v) for v in variables], root_rank=0)

    def barrier(self):
        # horovod.tensorflow has no barrier; a scalar allreduce returns only once
        # every rank has submitted it.
        import tensorflow as tf
        self._hvd.allreduce(tf.constant(0.0), op=self._hvd.Sum, name="horovod_train_barrier")

    def shutdown(self):
        self._hvd.shutdown()
