"""GPU utilization and memory through NVML (the nvidia-ml-py package, `pynvml`).

Imported lazily: on a host without the package, the driver or a GPU, the sampler
records nothing and says why once. Each rank samples the GPU of its local rank.
"""
from absl import logging


class GpuSampler:
    def __init__(self, local_rank: int, say=logging.info, no_gpu_reason: str | None = None):
        self._nvml = self._handle = None
        self.reason = no_gpu_reason
        if no_gpu_reason:  # known already: NVML is not loaded at all
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            if count == 0:
                raise RuntimeError("NVML sees no GPU")
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(local_rank % count)
            self._nvml = pynvml
        except Exception as err:  # ImportError, NVMLError_*: all mean "no GPU figures"
            self.reason = f"{type(err).__name__}: {err}"
            say("gpu   | no GPU utilization or memory recorded (%s)", self.reason)

    @property
    def available(self) -> bool:
        return self._handle is not None

    def sample(self) -> list[float]:
        """[utilization %, memory used MiB, 1] on a GPU; [0, 0, 0] without one (the
        third value counts the ranks that reported, so averages skip the others)."""
        if not self.available:
            return [0.0, 0.0, 0.0]
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            used = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2 ** 20
        except Exception:  # a lost device must not end the run
            return [0.0, 0.0, 0.0]
        return [float(util), float(used), 1.0]


def combine(rows) -> tuple:
    """Mean utilization and memory over the ranks that reported: (util, mem) or Nones."""
    reporting = [r for r in rows if r[2] > 0.5]
    if not reporting:
        return None, None
    n = len(reporting)
    return sum(r[0] for r in reporting) / n, sum(r[1] for r in reporting) / n


def sampler_for(local_rank: int) -> GpuSampler:
    """This rank's sampler. Where TF sees no GPU, the rank uses none and the `gpu | no GPU
    visible` line has said so: NVML is not even imported (pynvml's module alone takes a
    rank a quarter of a second to load, at every launch)."""
    import tensorflow as tf
    if not tf.config.list_logical_devices("GPU"):
        return GpuSampler(local_rank, no_gpu_reason="TensorFlow sees no GPU")
    return GpuSampler(local_rank)
