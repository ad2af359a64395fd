"""hvd.Compression: what gradients travel as (Horovod's names; bf16 is ours).

Horovod users pass `compression=hvd.Compression.fp16` to DistributedOptimizer and to
allreduce. Each compressor names the wire format our backends already know
(launch.contract.COMPRESSIONS), so the backend does the cast where it must: bf16 on
Horovod travels by allgather, as its reduction kernels refuse bfloat16. A user's own
Compressor subclass (compress/decompress static methods, as Horovod documents) is
applied around an uncompressed reduction.
"""
import tensorflow as tf


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""
    wire = None  # a contract.COMPRESSIONS name, or None: apply compress/decompress here

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    wire = "none"


class _CastCompressor(Compressor):
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if not tensor.dtype.is_floating:
            return tensor, None
        return tf.cast(tensor, cls.dtype), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    wire = "fp16"
    dtype = tf.float16


class BF16Compressor(_CastCompressor):
    wire = "bf16"
    dtype = tf.bfloat16


class Compression:
    """hvd.Compression.none / .fp16, and .bf16."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def wire_name(compression) -> str | None:
    """The backend's name for a compressor (None for a user's own class)."""
    if compression is None:
        return "none"
    if isinstance(compression, str):
        return compression
    return getattr(compression, "wire", None)


def around(compressor, tensors, reduce) -> list:
    """reduce(list) -> list applied to a user's Compressor's compressed tensors, each
    result decompressed with its own context (the names above travel as a cast instead)."""
    tensors = list(tensors)
    sent, ctxs = zip(*[compressor.compress(t) for t in tensors]) if tensors else ((), ())
    return [compressor.decompress(r, c) for r, c in zip(reduce(list(sent)), ctxs)]


def by_name(name: str):
    return {"none": NoneCompressor, "fp16": FP16Compressor, "bf16": BF16Compressor}[name]
