"""Horovod ring-allreduce through horovod.tensorflow's core collectives.

We deliberately do not use horovod.tensorflow.keras: under Keras 3 its
DistributedOptimizer leaves ranks silently diverged and its broadcast callback
fails ("'Variable' object has no attribute 'ref'"). Keras 3 variables wrap a
tf.Variable (`v.value`); every collective here acts on that.
"""
import os

import tensorflow as tf

from horovod_train import devices
from horovod_train.backends import buckets
from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.config import DEFAULT_BUCKET_MB
from horovod_train.errors import UsageError, check_choice
from launch import contract, horovod_build


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as err:
        raise UsageError(f"--backend=horovod: Horovod is not importable ({err}); expected "
                         f"horovod built with TensorFlow support. Fix: run 'make setup', "
                         f"or pass --backend=local (one process) or --backend=mwms") from err
    return hvd


def knob_env(fusion_threshold_mb=None, cycle_time_ms=None, hierarchical_allreduce=False,
             timeline_path=None) -> dict:
    """Our flags as the HOROVOD_* variables Horovod reads at init (flags beat env)."""
    env = {}
    if timeline_path:
        # Read once, in hvd.init(); only the coordinator (rank 0) writes the file.
        env["HOROVOD_TIMELINE"] = os.path.abspath(timeline_path)
    if fusion_threshold_mb is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(fusion_threshold_mb * 1024 * 1024))
    if cycle_time_ms is not None:
        env["HOROVOD_CYCLE_TIME"] = f"{cycle_time_ms:g}"
    if hierarchical_allreduce:
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    return env


def _shares_cpu(local_size: int, gpus: int) -> bool:
    """Several ranks on one host with no GPU: they share its cores."""
    return local_size >= 2 and gpus == 0


def _cpu_sharing_defaults(local_size: int, gpus: int, environ, build) -> dict:
    """The env defaults we set for several CPU ranks on one host (horovod_build.py: they
    depend on the build); the user's win. Not on a GPU host: its ranks wait on their
    GPUs, and a 5 ms cycle would delay every allreduce."""
    if not _shares_cpu(local_size, gpus):
        return {}
    return {k: v for k, v in horovod_build.cpu_sharing_defaults(build).items()
            if k not in environ}


def unset_bucket_mb(local_size: int, gpus: int, gloo: bool) -> float:
    """The bucket size when --allreduce_bucket_mb is unset. Buckets overlap the transport
    with backprop, which pays when the transport has an engine of its own (NCCL on a GPU)
    and paid under MPI's shared memory on 2 shared cores; under Gloo with ranks sharing a
    CPU host's cores, a bucket's TCP exchange needs the peer's threads, which compete
    with backprop for each rank's core: one call after backprop was 13-21% faster on
    resnet18_cifar with our Gloo patches (docs/benchmarks.md, M2 overlap). The same rule
    for a stock Horovod (launch/horovod_build.py), whose Gloo loop spins where ours
    yields, so competes more: one call beat buckets in 3 of 4 A/B pairs on stock
    (resnet18_cifar, 2026-12-06, a loaded host: docs/install.md)."""
    return 0.0 if gloo and _shares_cpu(local_size, gpus) else DEFAULT_BUCKET_MB


class HorovodBackend(Backend):
    name = "horovod"
    collective_op_types = frozenset({"HorovodAllreduce", "HorovodGroupedAllreduce",
                                     "HorovodAllgather", "HorovodGroupedAllgather",
                                     "HorovodBroadcast"})

    def __init__(self, compression: str = "none", fusion_threshold_mb: float | None = None,
                 cycle_time_ms: float | None = None, hierarchical_allreduce: bool = False,
                 timeline_path: str | None = None, bucket_mb: float | None = None):
        super().__init__()
        check_choice("compression", compression, contract.COMPRESSIONS)
        self.bucket_mb = bucket_mb  # None: unset_bucket_mb decides in setup()
        self.bucket_bytes = buckets.mib_to_bytes(bucket_mb)
        self._hvd = _import_horovod()
        self.build = horovod_build.detect()  # patched or stock: the defaults follow it
        self.compression = compression
        self.timeline_path = timeline_path  # the loop says so when a backend has none
        self.knobs = knob_env(fusion_threshold_mb, cycle_time_ms, hierarchical_allreduce,
                              timeline_path)

    @classmethod
    def options_from_config(cls, config, timeline_path=None) -> dict:
        rt = config.runtime
        return {"compression": config.speed.compression,
                "fusion_threshold_mb": rt.fusion_threshold_mb or None,  # 0: Horovod's default
                "cycle_time_ms": rt.cycle_time_ms or None,
                "hierarchical_allreduce": rt.hierarchical_allreduce,
                "timeline_path": timeline_path,
                "bucket_mb": config.speed.allreduce_bucket_mb}

    def describe(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(self.knobs.items()))
        chosen = " (unset: Gloo ranks sharing CPU cores)" if (
            self.bucket_mb is None and self.bucket_bytes != buckets.mib_to_bytes(None)) else ""
        return (f"{self.build.describe()} (compression {self.compression}, "
                f"{buckets.describe(self.bucket_bytes)}{chosen}"
                f"{', ' + knobs if knobs else ''})")

    def setup(self) -> ProcessInfo:
        from horovod_train.env import check_mpi_wired, launch_info
        check_mpi_wired()  # before hvd.init(): Open MPI's own abort is a page of text
        # Physical devices: listing them does not create TF's devices (pinning comes later).
        gpus = len(tf.config.list_physical_devices("GPU"))
        self.chosen_env = {k: v for k, v in
                           _cpu_sharing_defaults(launch_info().local_size, gpus, os.environ,
                                                 self.build).items()
                           if k not in self.knobs}
        os.environ.update(self.chosen_env)
        os.environ.update(self.knobs)
        self._elastic = contract.horovod_elastic(os.environ)
        hvd = self._hvd
        hvd.init()
        self.info = ProcessInfo(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
        if self.bucket_mb is None:  # the controller is known only now
            self.bucket_bytes = buckets.mib_to_bytes(
                unset_bucket_mb(self.info.local_size, gpus, hvd.gloo_enabled()))
        # Horovod's own local rank (it also covers launchers env.py cannot read); hvd.init()
        # does not create TF's devices, so pinning still takes effect here.
        self.gpu = devices.pin_gpu(self.info.local_rank, self.info.local_size,
                                   chief=self.info.is_chief)
        return self.info

    def allreduce_gradients(self, grads, compression=None):
        # One allreduce per bucket (backends/buckets.py), last layers first: each is
        # issued as soon as backprop has produced its gradients, so the early buckets
        # travel while the rest is computed; every rank builds the same buckets.
        grads = list(grads)
        compression = compression or self.compression
        reduce = self._allreduce_bf16 if compression == "bf16" else \
            lambda part: self._allreduce(part, tf.float16 if compression == "fp16" else None)
        sizes = [g.shape.num_elements() * g.dtype.size for g in grads]
        out, wire = [None] * len(grads), 0
        for bucket in buckets.buckets(sizes, self.bucket_bytes):
            reduced, sent = reduce([grads[i] for i in bucket])
            wire += sent
            for i, r in zip(bucket, reduced):
                out[i] = r
        self.wire_bytes_per_step = wire
        return out

    def _allreduce(self, grads, wire):
        """(means, bytes sent): the bucket's mean, cast to `wire` for the trip."""
        sent = [tf.cast(g, wire) if wire else g for g in grads]
        reduced = self._packed_mean(sent)
        return ([tf.cast(r, g.dtype) for r, g in zip(reduced, grads)],
                sum(g.shape.num_elements() * g.dtype.size for g in sent))

    def _packed_mean(self, tensors) -> list:
        """Means of `tensors`: per dtype, ONE allreduce of them all laid end to end, then
        cut back. Horovod's cost grows with the number of tensors it is handed (an entry
        each to negotiate, copy into its fusion buffer and out again: 128 x 16 KiB took
        2.8x one tensor of the same bytes); TF's concat and split are one pass each.
        Elementwise the same sums, so the same result as a grouped allreduce."""
        out = [None] * len(tensors)
        by_dtype = {}
        for i, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(i)
        for index in by_dtype.values():
            if len(index) == 1:
                out[index[0]] = self._mean(tensors[index[0]])
                continue
            flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in index], axis=0)
            mean = self._mean(flat)
            parts = tf.split(mean, [tensors[i].shape.num_elements() for i in index])
            for i, part in zip(index, parts):
                out[i] = tf.reshape(part, tf.shape(tensors[i]))
        return out

    def _mean(self, tensor):
        """The ranks' mean of one tensor. Horovod's Average sums and then divides, in a
        pass of its own over the result; scaling by 1 / size on the way in (Horovod's
        prescale, done in the copy of the input into the output) and summing saves that
        pass under MPI: 16 MiB in 5.9 ms instead of 7.3 (docs/benchmarks.md, M3). With a
        power-of-two size the two are bitwise the same. An elastic ring can re-form at
        another size under a traced step, so there Horovod's Average (size read when it
        runs) stays."""
        if self._elastic:
            return self._hvd.allreduce(tensor, op=self._hvd.Average)
        return self._hvd.allreduce(tensor, op=self._hvd.Sum, prescale_factor=1.0 / self.info.size)

    def graph_mean(self, tensors, compression=None) -> list:
        # Horovod's ops run in any tf.function, replica context or not.
        if self.info.size == 1:
            return list(tensors)
        return self.allreduce_gradients(tensors, compression)

    def _allreduce_bf16(self, grads):
        """bfloat16 on the wire. Horovod's reduction kernels refuse bfloat16, so the
        16-bit values travel by allgather (as opaque 16-bit words) and are summed in
        float32 on arrival. Per rank that moves (n-1) * S/2 bytes, against a float32
        ring's 2(n-1)/n * S: less up to 3 ranks, more beyond - prefer fp16 at scale."""
        words = [tf.reshape(tf.bitcast(tf.cast(g, tf.bfloat16), tf.float16), [1, -1])
                 for g in grads]
        gathered = self._hvd.grouped_allgather(words)
        return ([tf.reshape(tf.reduce_mean(tf.cast(tf.bitcast(w, tf.bfloat16), g.dtype), axis=0),
                            tf.shape(g)) for w, g in zip(gathered, grads)],
                sum(w.shape.num_elements() * 2 for w in words))

    def allreduce_mean(self, value):
        return self._hvd.allreduce(value, op=self._hvd.Average)

    def broadcast_variables(self, variables):
        # A Keras 3 variable wraps a tf.Variable (its .value property); a plain
        # tf.Variable (the loss scale) is one already, and its .value is a method.
        plain = [v if isinstance(v, tf.Variable) else v.value for v in variables]
        self._hvd.broadcast_variables(plain, root_rank=0)

    def barrier(self):
        # horovod.tensorflow has no barrier; a scalar allreduce returns only once
        # every rank has submitted it.
        self._hvd.allreduce(tf.constant(0.0), op=self._hvd.Sum, name="horovod_train_barrier")

    def tensor_ops(self):
        from horovod_train.backends.horovod_ops import HorovodOps
        return HorovodOps(self, self._hvd)

    def elastic_driver(self, owner):
        from horovod_train.backends import horovod_elastic
        return horovod_elastic.KerasDriver(self, owner)

