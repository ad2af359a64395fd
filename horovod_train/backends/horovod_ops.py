"""Horovod's tensor collectives behind TensorOps: a thin mapping onto horovod.tensorflow.

Everything Horovod offers is here, so a script that calls hvd.allreduce(...,
op=hvd.Min) or hvd.reducescatter(...) gets Horovod's own op, with Horovod's fusion
and response cache.
"""
import tensorflow as tf

from horovod_train.backends.ops import FACT_NAMES, ReduceOp, TensorOps


class HorovodOps(TensorOps):
    def __init__(self, backend, hvd):
        super().__init__(backend)
        self._hvd = hvd

    def _op(self, op: ReduceOp):
        return getattr(self._hvd, op.value)  # hvd.Average, hvd.Sum, hvd.Min, ...

    def allreduce(self, tensor, op: ReduceOp, prescale=1.0, postscale=1.0):
        return self._hvd.allreduce(tf.convert_to_tensor(tensor), op=self._op(op),
                                   prescale_factor=prescale, postscale_factor=postscale)

    def grouped_allreduce(self, tensors, op: ReduceOp, prescale=1.0, postscale=1.0) -> list:
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if not tensors:
            return []
        return list(self._hvd.grouped_allreduce(tensors, op=self._op(op),
                                                prescale_factor=prescale,
                                                postscale_factor=postscale))

    def reducescatter(self, tensor, op: ReduceOp):
        return self._hvd.reducescatter(tf.convert_to_tensor(tensor), op=self._op(op))

    def allgather(self, tensor):
        return self._hvd.allgather(tf.convert_to_tensor(tensor))

    def broadcast(self, tensor, root_rank: int):
        self.check_root(root_rank)
        return self._hvd.broadcast(tf.convert_to_tensor(tensor), root_rank)

    def grouped_broadcast(self, tensors, root_rank: int) -> list:
        self.check_root(root_rank)
        return [self._hvd.broadcast(tf.convert_to_tensor(t), root_rank) for t in tensors]

    def facts(self) -> dict:
        return {name: _fact(getattr(self._hvd, name)) for name in FACT_NAMES}

    def cross(self) -> tuple[int, int]:
        return self._hvd.cross_rank(), self._hvd.cross_size()

    def shutdown(self):
        self._hvd.shutdown()

    def start_timeline(self, file_path, mark_cycles=False):
        self._hvd.start_timeline(file_path, mark_cycles=mark_cycles)

    def stop_timeline(self):
        self._hvd.stop_timeline()


def _fact(query) -> bool:
    # mpi_threads_supported() raises when Horovod runs on Gloo: then it is simply False.
    try:
        return bool(query())
    except ValueError:
        return False
