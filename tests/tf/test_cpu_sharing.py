"""The CPU-sharing defaults (the cycle the build suits, yielding MPI) are for ranks that
share CPU cores; a GPU host keeps Horovod's own (its ranks wait on GPUs, not on each
other)."""
import pytest

pytest.importorskip("horovod.tensorflow")
from horovod_train.backends.horovod import _cpu_sharing_defaults, unset_bucket_mb
from horovod_train.config import DEFAULT_BUCKET_MB
from launch import horovod_build
from launch.horovod_build import PATCHED, STOCK

CPU_SHARING_DEFAULTS = horovod_build.cpu_sharing_defaults(PATCHED)


def test_cpu_ranks_sharing_a_host_get_the_defaults():
    assert _cpu_sharing_defaults(2, gpus=0, environ={}, build=PATCHED) == CPU_SHARING_DEFAULTS


def test_a_gpu_host_keeps_horovods_defaults_even_without_cuda_visible_devices():
    assert _cpu_sharing_defaults(8, gpus=8, environ={}, build=STOCK) == {}


def test_one_rank_or_hidden_gpus_or_the_users_own_setting():
    assert _cpu_sharing_defaults(1, gpus=0, environ={}, build=PATCHED) == {}
    assert _cpu_sharing_defaults(2, gpus=0, environ={"CUDA_VISIBLE_DEVICES": "-1"},
                                 build=PATCHED) == CPU_SHARING_DEFAULTS
    mine = _cpu_sharing_defaults(2, gpus=0, environ={"HOROVOD_CYCLE_TIME": "1"}, build=PATCHED)
    assert "HOROVOD_CYCLE_TIME" not in mine and "OMPI_MCA_mpi_yield_when_idle" in mine


def test_a_stock_horovod_keeps_its_own_cycle():
    """Stock Horovod waits out the cycle on every allreduce (no wake-on-enqueue), so ranks
    sharing cores keep its 1 ms there (launch/horovod_build.py has the figures)."""
    assert _cpu_sharing_defaults(2, gpus=0, environ={}, build=STOCK) == {
        "HOROVOD_CYCLE_TIME": "1", "OMPI_MCA_mpi_yield_when_idle": "1"}


def test_gloo_ranks_sharing_a_cpu_host_reduce_once_after_backprop():
    """--allreduce_bucket_mb unset: under Gloo, ranks that share a CPU host's cores send
    their gradients in one call after backprop (buckets' transport would compete with
    backprop for each rank's one core: docs/benchmarks.md, M2 overlap)."""
    assert unset_bucket_mb(2, gpus=0, gloo=True) == 0


def test_buckets_under_mpi_on_gpus_and_for_one_rank_per_host():
    assert unset_bucket_mb(2, gpus=0, gloo=False) == DEFAULT_BUCKET_MB  # MPI: buckets won
    assert unset_bucket_mb(8, gpus=8, gloo=True) == DEFAULT_BUCKET_MB  # NCCL overlaps
    assert unset_bucket_mb(1, gpus=0, gloo=True) == DEFAULT_BUCKET_MB


def test_the_launcher_and_the_backend_choose_the_same_defaults():
    """Written once (launch/horovod_build.py): `python -m launch --cores_per_host` and the
    horovod backend (ranks started without it) cannot drift apart, for the build here."""
    from launch import envvars
    build = horovod_build.detect()
    launched = envvars.cpu_sharing_env(cores=8, ranks_per_host=2)
    assert _cpu_sharing_defaults(2, gpus=0, environ={}, build=build) == \
        {k: launched[k] for k in horovod_build.cpu_sharing_defaults(build)}


def test_horovod_takes_its_own_options_only():
    from horovod_train import backends
    assert backends.options_of("horovod") == (
        "compression", "fusion_threshold_mb", "cycle_time_ms", "hierarchical_allreduce",
        "timeline_path", "bucket_mb")
    with pytest.raises(backends.UsageError, match="received option\\(s\\) fusion_treshold_mb"):
        backends.create("horovod", fusion_treshold_mb=64)
    with pytest.raises(backends.UsageError, match="compression: received 'int8'"):
        backends.create("horovod", compression="int8")
    backend = backends.create("horovod", compression="fp16", cycle_time_ms=3)
    assert backend.describe() == (f"{horovod_build.detect().describe()} (compression fp16, "
                                  "gradient buckets of 4 MiB, HOROVOD_CYCLE_TIME=3)")
    assert backend.describe().startswith("horovod 0.28.1 ")
    assert backend.chosen_env == {} and backend.timeline_path is None
