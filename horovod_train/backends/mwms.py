"""tf.distribute.MultiWorkerMirroredStrategy behind the same interface.

The strategy is built for what it sets up: the TF_CONFIG cluster, TF's collective
runtime (gRPC ring or NCCL, the timeout) and its health checks of the peers. Every
collective then goes through one path, the raw collective ops of mwms_comm.py, from
any tf.function or eagerly; the strategy's scope, strategy.run, strategy.reduce and
its distributed datasets are not used. Each worker is one replica (devices.pin_gpu
keeps it at one GPU at most), so they would add only a second way to reduce: the
train step, the Keras drop-in and Horovod's API run here as they do on Horovod, on
plain variables and this worker's own shard of the input.
"""
import json
import os

import tensorflow as tf
from absl import logging
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
# No public API configures the coordination service; MWMS itself uses this one.
from tensorflow.python.eager import context

from horovod_train import devices, watchdog
from horovod_train.backends import buckets
from horovod_train.backends import tf_config as tfc
from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.backends.mwms_comm import MwmsComm
from horovod_train.errors import check_choice, check_positive
from launch import contract

IMPLEMENTATIONS = {
    name: getattr(tf.distribute.experimental.CommunicationImplementation, name.upper())
    for name in contract.COLLECTIVES
}


class MwmsBackend(Backend):
    name = "mwms"
    collective_op_types = frozenset({"CollectiveReduce", "CollectiveReduceV2",
                                     "CollectiveReduceV3", "CollectiveGather",
                                     "CollectiveGatherV2"})

    def __init__(self, collective: str = "auto", collective_timeout_s: float = 300.0,
                 port_base: int = contract.DEFAULT_MWMS_PORT_BASE, compression: str = "none",
                 bucket_mb: float | None = None):
        super().__init__()
        self.bucket_bytes = buckets.mib_to_bytes(bucket_mb)
        check_choice("collective", collective, contract.COLLECTIVES)
        check_choice("compression", compression, contract.COMPRESSIONS)
        check_positive("collective_timeout_s", collective_timeout_s)
        self.compression = compression
        self.collective = collective
        self.timeout_s = collective_timeout_s
        self.port_base = port_base
        self.strategy = None

    @classmethod
    def options_from_config(cls, config, timeline_path=None) -> dict:
        rt = config.runtime
        return {"collective": rt.collective, "collective_timeout_s": rt.collective_timeout_s,
                "port_base": rt.mwms_port_base, "compression": config.speed.compression,
                "bucket_mb": config.speed.allreduce_bucket_mb}

    def describe(self) -> str:
        return (f"mwms (collective {self.collective}, timeout {self.timeout_s:g} s, "
                f"compression {self.compression}, {buckets.describe(self.bucket_bytes)})")

    def setup(self) -> ProcessInfo:
        config = tfc.resolve_tf_config(os.environ, self.port_base)
        os.environ["TF_CONFIG"] = json.dumps(config)
        workers, index = config["cluster"]["worker"], config["task"]["index"]
        local_rank, local_size = tfc.local_position(workers, index)
        # Before the strategy: it creates TF's devices, and MWMS makes one replica per
        # visible GPU, so pinning also keeps it at one GPU (one replica) per worker.
        self.gpu = devices.pin_gpu(local_rank, local_size, chief=index == 0)
        # Resolved once, so the communicator's collectives use the strategy's.
        requested = self.collective
        self.collective = devices.choose_collective(requested, 1 if self.gpu.uses_gpu else 0)
        if index == 0:
            logging.info("mwms  | collectives %s (--collective=%s, %s)", self.collective.upper(),
                         requested, "GPU" if self.gpu.uses_gpu else "no GPU")
        tfc.rendezvous(workers, index, self.timeout_s)
        # TF's own collective timeout is the backstop: the watchdog (the same bound) ends a
        # stalled worker first, with every worker's live stacks (stacks.py).
        collective_timeout_s = self.timeout_s + watchdog.REPORT_MARGIN_S
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=IMPLEMENTATIONS[self.collective], timeout_seconds=collective_timeout_s)
        _coordinate(len(workers), heartbeat_timeout_s=collective_timeout_s)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        self.info = ProcessInfo(index, len(workers), local_rank, local_size)
        self.comm = MwmsComm(self, self.collective, collective_timeout_s)
        return self.info


def _coordinate(num_workers: int, heartbeat_timeout_s: float):
    """TF's coordination service as MWMS configures it (worker 0 leads; configured first,
    MWMS keeps it), with the job's own bound as the heartbeat timeout. TF's default, 10 s,
    declared a worker starved by a loaded host (compiling under XLA beside other jobs)
    dead and aborted a healthy job; a worker silent for the bound is ended by the
    watchdog first, with every worker's stacks (stacks.py)."""
    context.context().configure_coordination_service(
        service_type="standalone", service_leader="/job:worker/replica:0/task:0",
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name="worker",
                                                                 num_tasks=num_workers)],
        heartbeat_timeout_in_ms=int(heartbeat_timeout_s * 1000))
