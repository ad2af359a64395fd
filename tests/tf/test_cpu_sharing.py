"""The CPU-sharing defaults (5 ms cycle, yielding MPI) are for ranks that share CPU
cores; a GPU host keeps Horovod's own (its ranks wait on GPUs, not on each other)."""
import pytest

pytest.importorskip("horovod.tensorflow")
from horovod_train.backends.horovod import CPU_SHARING_DEFAULTS, _cpu_sharing_defaults


def test_cpu_ranks_sharing_a_host_get_the_defaults():
    assert _cpu_sharing_defaults(2, gpus=0, environ={}) == CPU_SHARING_DEFAULTS


def test_a_gpu_host_keeps_horovods_defaults_even_without_cuda_visible_devices():
    assert _cpu_sharing_defaults(8, gpus=8, environ={}) == {}


def test_one_rank_or_hidden_gpus_or_the_users_own_setting():
    assert _cpu_sharing_defaults(1, gpus=0, environ={}) == {}
    assert _cpu_sharing_defaults(2, gpus=0, environ={"CUDA_VISIBLE_DEVICES": "-1"}) == CPU_SHARING_DEFAULTS
    mine = _cpu_sharing_defaults(2, gpus=0, environ={"HOROVOD_CYCLE_TIME": "1"})
    assert "HOROVOD_CYCLE_TIME" not in mine and "OMPI_MCA_mpi_yield_when_idle" in mine
