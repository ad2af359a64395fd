"""Which GPU a rank uses, and which collectives MWMS runs on it. TF-free at import.

Data parallel means one GPU per rank. The rule lives in `choose_gpu` (pure, unit-tested
without TF); `pin_gpu` applies it to TensorFlow, and every backend's setup() calls it
before TF creates its devices, so the CLI and the Keras drop-in follow the same rule.
"""
import dataclasses
from typing import Sequence

from absl import logging

from horovod_train import env
from horovod_train.errors import UsageError, check_choice
from launch.contract import COLLECTIVES


@dataclasses.dataclass(frozen=True)
class GpuChoice:
    """What one rank sees: `index` into the GPUs it was shown, or None for CPU only."""
    index: int | None
    visible: tuple = ()  # the GPUs this process was shown, as the caller names them
    local_rank: int = 0
    local_size: int = 1
    bound: bool = False  # the launcher already gave this process GPUs of its own

    @property
    def uses_gpu(self) -> bool:
        return self.index is not None

    @property
    def device(self):
        return None if self.index is None else self.visible[self.index]

    @property
    def idle(self) -> int:
        """GPUs shown to this process that no rank will use (this process's own, when
        bound; else the host's beyond its ranks)."""
        if self.index is None:
            return 0
        return len(self.visible) - (1 if self.bound else self.local_size)

    def describe(self) -> str:
        if self.index is None:
            return "gpu   | no GPU visible: training on CPU"
        how = "the launcher's binding" if self.bound else \
            f"local rank {self.local_rank} of {self.local_size}"
        line = (f"gpu   | {self.device} ({self.index + 1} of {len(self.visible)} visible) "
                f"from {how}; memory growth on")
        if self.idle > 0:
            fix = ("ask the launcher for one GPU per task (srun --gpus-per-task=1)"
                   if self.bound else f"start {len(self.visible)} ranks per host")
            line += f"; {self.idle} GPU(s) stay idle: to use them, {fix}"
        return line


def choose_gpu(visible: Sequence, local_rank: int, local_size: int,
               bound: bool = False) -> GpuChoice:
    """(GPUs this process sees, its local rank and size, launcher binding) -> its GPU.

    - no GPU: CPU only, nothing pinned;
    - bound by the launcher (one-device CUDA_VISIBLE_DEVICES, srun --gpus-per-task):
      the GPUs shown are this rank's own, so it takes the first;
    - else the host's GPUs are shared out: local rank i takes GPU i (a single process
      takes GPU 0 of several: one GPU per rank);
    - more local ranks than GPUs: refused on every rank of the host (shared GPUs
      would collide in NCCL or run out of memory), before any rank starts TF.
    """
    visible = tuple(visible)
    if not 0 <= local_rank < max(1, local_size):
        raise UsageError(f"local rank: received {local_rank} with local size {local_size}; "
                         f"expected 0 <= local rank < local size. Fix: start ranks with "
                         f"horovodrun, mpirun or srun, which set both consistently")
    choice = dict(visible=visible, local_rank=local_rank, local_size=local_size, bound=bound)
    if not visible:
        return GpuChoice(None, **choice)
    if bound:
        return GpuChoice(0, **choice)
    if local_size > len(visible):
        raise UsageError(
            f"GPUs: received {local_size} ranks on this host for {len(visible)} visible "
            f"GPU(s); expected at most one rank per GPU. Fix: start at most {len(visible)} "
            f"rank(s) per host, or set CUDA_VISIBLE_DEVICES=\"\" to train on CPU")
    return GpuChoice(local_rank, **choice)


def pin_gpu(local_rank: int, local_size: int, chief: bool = True, environ=None,
            tf_config=None) -> GpuChoice:
    """Makes this rank's GPU the only one TF sees, with memory growth on (TF would
    otherwise reserve nearly all of every visible GPU's memory). CPU only: touches
    nothing. Must run before TF creates its devices; `tf_config` is tf.config."""
    if tf_config is None:
        import tensorflow as tf
        tf_config = tf.config
    gpus = tf_config.list_physical_devices("GPU")
    choice = choose_gpu([g.name for g in gpus], local_rank, local_size,
                        env.gpus_bound_per_task(environ))
    if choice.index is None:
        if chief:
            logging.info(choice.describe())
        return choice
    gpu = gpus[choice.index]
    try:
        # Growth on every GPU, not just ours: a Horovod script sets it on each GPU after
        # hvd.init(), and once TF has created its devices (MWMS's strategy does) TF accepts
        # only settings it already holds. Growth on a GPU TF never sees changes nothing.
        for each in gpus:
            tf_config.experimental.set_memory_growth(each, True)
        tf_config.set_visible_devices(gpu, "GPU")
    except RuntimeError as err:  # TF created its devices already; the same choice passes
        _already_initialised(tf_config, gpu, choice, err)
    if chief:
        (logging.warning if choice.idle > 0 else logging.info)(choice.describe())
    return choice


def _already_initialised(tf_config, gpu, choice: GpuChoice, err: RuntimeError):
    """Too late to choose: fatal where ranks would share this host's GPUs, a warning
    for a lone process (it computes on GPU 0 anyway and only holds more memory)."""
    if choice.local_size > 1 and tf_config.get_visible_devices("GPU") != [gpu]:
        raise UsageError(
            f"GPUs: received a TensorFlow that already created its devices ({err}), so local "
            f"rank {choice.local_rank} cannot be pinned to {gpu.name}; expected the job to be "
            f"joined before any TF op. Fix: create htk.Strategy() (or the backend) at the top "
            f"of the script, before building models or running TF ops") from None
    logging.warning("gpu   | TensorFlow already created its devices (%s); keeping them, "
                    "memory growth may be off. Join the job before any TF op to pin one GPU.",
                    err)


def choose_collective(requested: str, gpus: int) -> str:
    """MWMS collectives: auto -> NCCL with a GPU, RING (gRPC) on CPU; explicit honoured."""
    check_choice("--collective", requested, COLLECTIVES)
    if requested == "nccl" and gpus == 0:
        raise UsageError("--collective: received 'nccl' with no GPU visible to this worker; "
                         "expected a GPU for NCCL. Fix: pass --collective=auto (RING on CPU) "
                         "or --collective=ring, or run on a GPU host (check nvidia-smi and "
                         "CUDA_VISIBLE_DEVICES)")
    if requested == "auto":
        return "nccl" if gpus > 0 else "ring"
    return requested
