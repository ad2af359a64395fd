"""Horovod's collectives behind the Communicator: a thin mapping onto horovod.tensorflow.

A grouped allreduce is one Horovod allreduce per dtype of the tensors laid end to end
(comm.packed): Horovod's cost grows with the number of tensors it is handed (an entry
each to negotiate, copy into its fusion buffer and out again: 128 x 16 KiB took 2.8x
one tensor of the same bytes), where TF's concat and split are one pass each.
"""
import tensorflow as tf

from horovod_train.backends import comm
from horovod_train.backends.comm import FACT_NAMES, ReduceOp
from horovod_train.errors import UsageError


class HorovodComm(comm.Communicator):
    reaches_peers = True

    def __init__(self, backend, hvd, elastic: bool, gloo: bool = False):
        super().__init__(backend)
        self._hvd = hvd
        self._elastic = elastic
        self._gloo = gloo  # Gloo runs the CPU collectives (hvd.gloo_enabled())

    def _op(self, op: ReduceOp):
        return getattr(self._hvd, op.value)  # hvd.Average, hvd.Sum, hvd.Min, ...

    def _reduce(self, tensors, op: ReduceOp, prescale, postscale) -> list:
        out = [None] * len(tensors)
        # compression="bf16": Horovod's kernels cannot reduce bfloat16.
        halves = [i for i, t in enumerate(tensors) if t.dtype == tf.bfloat16]
        rest = [i for i, t in enumerate(tensors) if t.dtype != tf.bfloat16]
        parts = [(halves, lambda ts: self._bf16_mean(ts, op, prescale, postscale)),
                 (rest, lambda ts: comm.packed(ts, lambda flat: self._allreduce(
                     flat, op, prescale, postscale), keep_single_shape=True))]
        for idx, reduce in parts:
            if idx:
                for i, r in zip(idx, reduce([tensors[i] for i in idx])):
                    out[i] = r
        return out

    def _allreduce(self, flat, op, prescale, postscale):
        if op is ReduceOp.AVERAGE and flat.dtype.is_floating and not self._elastic:
            # Horovod's Average sums and then divides, in a pass of its own over the
            # result; scaling by 1 / size on the way in (its prescale, done in the copy
            # of the input) and summing saves that pass under MPI: 16 MiB in 5.9 ms
            # instead of 7.3. With a power-of-two size the two are bitwise the same. An
            # elastic ring can re-form at another size under a traced step, so there
            # Horovod's Average (size read when it runs) stays.
            op, prescale = ReduceOp.SUM, prescale / self.info.size
        return self._hvd.allreduce(flat, op=self._op(op), prescale_factor=prescale,
                                   postscale_factor=postscale)

    def _bf16_mean(self, tensors, op, prescale, postscale):
        """bfloat16 on the wire. Horovod's reduction kernels refuse bfloat16, so the
        16-bit values travel by allgather (as opaque 16-bit words) and are averaged in
        float32 on arrival. Per rank that moves (n-1) * S/2 bytes, against a float32
        ring's 2(n-1)/n * S: less up to 3 ranks, more beyond - prefer fp16 at scale."""
        if op is not ReduceOp.AVERAGE or prescale != 1.0 or postscale != 1.0:
            raise UsageError(f"compression bf16: received op={op!r}, prescale {prescale:g}, "
                             f"postscale {postscale:g} under Horovod, which cannot reduce "
                             f"bfloat16 (it travels by allgather and is averaged); expected "
                             f"op=hvd.Average without scale factors. Fix: use fp16 compression "
                             f"for other reductions")
        words = [tf.reshape(tf.bitcast(t, tf.float16), [1, -1]) for t in tensors]
        gathered = self._hvd.grouped_allgather(words)
        return [tf.reshape(tf.reduce_mean(tf.cast(tf.bitcast(w, tf.bfloat16), tf.float32), 0),
                           tf.shape(t)) for w, t in zip(gathered, tensors)]

    def reducescatter(self, tensor, op: ReduceOp = ReduceOp.AVERAGE):
        tensor = tf.convert_to_tensor(tensor)
        if self._gloo and _pairwise(tensor, op):
            return self._reducescatter_by_alltoall(tensor, op)
        # Horovod's own Average (a sum, then each rank's 1/N slice scaled), not the
        # allreduce's prescaled Sum: a prescale scales the whole input in a pass through
        # the fusion buffer (and refuses an input larger than the buffer); measured, it
        # made --shard_optimizer_state's decoder_lm step 8% slower. On 2 ranks
        # (a + b) / 2 and a / 2 + b / 2 are the same float.
        return self._hvd.reducescatter(tensor, op=self._op(op))

    def _reducescatter_by_alltoall(self, tensor, op: ReduceOp):
        """Under Gloo: each rank sends every other rank that rank's rows (one
        alltoall, the (N-1)/N of the bytes a ring reduce-scatter moves) and sums the N
        pieces of its own rows in rank order. Horovod hands Gloo's reduce-scatter to its
        halving-doubling algorithm, which with ranks bound one per core took 36 ms for
        12.6 MiB in some launches (8 ms in others, for the whole launch) where this takes
        7 ms in every one (bench/shard_state.py's ranks are bound so)."""
        size = self.info.size
        splits = comm.split_sizes(tensor.shape[0], size)
        got, _ = self._hvd.alltoall(tensor, splits=splits)  # (rows, their counts)
        pieces = tf.reshape(got, [size, splits[self.info.rank], *tensor.shape[1:]])
        total = tf.reduce_sum(pieces, 0)
        return total * (1.0 / size) if op is ReduceOp.AVERAGE else total

    def allgather(self, tensor):
        return self._hvd.allgather(tf.convert_to_tensor(tensor))

    def alltoall(self, tensor, splits=None, name=None):
        tensor = tf.convert_to_tensor(tensor)
        if splits is None:
            return (self._hvd.alltoall(tensor, name=name),
                    comm.even_splits(tensor, self.info.size))
        return self._hvd.alltoall(tensor, splits=tf.cast(splits, tf.int32), name=name)

    def join(self):
        return self._hvd.join()

    def grouped_broadcast(self, tensors, root_rank: int) -> list:
        self.check_root(root_rank)
        return [self._hvd.broadcast(tf.convert_to_tensor(t), root_rank) for t in tensors]

    def broadcast_variables(self, variables, root_rank: int = 0):
        # Horovod's own: eagerly it runs every broadcast and assign as one compiled group.
        self.check_root(root_rank)
        self._hvd.broadcast_variables([comm.plain(v) for v in variables], root_rank=root_rank)

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


def _pairwise(tensor, op: ReduceOp) -> bool:
    """Whether a reduce-scatter can travel as an alltoall and a local sum: a floating
    Sum or Average of a tensor whose first dimension is known when it is traced."""
    return op in (ReduceOp.SUM, ReduceOp.AVERAGE) and tensor.dtype.is_floating \
        and tensor.shape.rank and tensor.shape[0] is not None


def _fact(query) -> bool:
    # mpi_threads_supported() raises when Horovod runs on Gloo: then it is simply False.
    try:
        return bool(query())
    except ValueError:
        return False


def installed_fact(name: str) -> bool:
    """A build fact (hvd.ccl_built(), ...) of the installed Horovod, False without one:
    what the library can do before any job is joined, as Horovod answers it."""
    try:
        import horovod.tensorflow as installed
        return bool(getattr(installed, name)())
    except Exception:  # noqa: BLE001 - not installed, or not loadable here: not built
        return False
