"""Horovod ring-allreduce through horovod.tensorflow's core collectives.

We deliberately do not use horovod.tensorflow.keras: under Keras 3 its
DistributedOptimizer leaves ranks silently diverged and its broadcast callback
fails ("'Variable' object has no attribute 'ref'"). Keras 3 variables wrap a
tf.Variable (`v.value`); every collective (horovod_comm.py) acts on that.
"""
import os

import tensorflow as tf

from horovod_train import devices
from horovod_train.backends import buckets
from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.backends.horovod_comm import HorovodComm
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
                                     "HorovodBroadcast", "HorovodReducescatter",
                                     "HorovodGroupedReducescatter", "HorovodAlltoall"})

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
        hvd = self._hvd
        hvd.init()
        self.info = ProcessInfo(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
        self.comm = HorovodComm(self, hvd, elastic=contract.horovod_elastic(os.environ),
                                gloo=hvd.gloo_enabled())
        if self.bucket_mb is None:  # the controller is known only now
            self.bucket_bytes = buckets.mib_to_bytes(
                unset_bucket_mb(self.info.local_size, gpus, hvd.gloo_enabled()))
        # Horovod's own local rank (it also covers launchers env.py cannot read); hvd.init()
        # does not create TF's devices, so pinning still takes effect here.
        self.gpu = devices.pin_gpu(self.info.local_rank, self.info.local_size,
                                   chief=self.info.is_chief)
        return self.info

    def elastic_driver(self, owner):
        from horovod_train.backends import horovod_elastic
        return horovod_elastic.KerasDriver(self, owner)

