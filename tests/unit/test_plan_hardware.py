"""Hardware tables: lookups, precision support, effective bandwidths."""
import pytest

from horovod_train.plan import hardware
from horovod_train.plan.errors import PlanError


def test_required_entries_exist():
    for gpu in ("v100-16gb", "v100-32gb", "a100-40gb", "a100-80gb", "h100-80gb",
                "h200-141gb", "p100-16gb"):
        assert gpu in hardware.GPUS
    for net in ("ib-edr", "ib-hdr", "ib-ndr", "roce-100g", "roce-200g", "roce-400g",
                "tcp-10g", "tcp-25g", "tcp-100g"):
        assert net in hardware.NETWORKS
    assert {"nvlink3", "pcie4"} <= set(hardware.INTRA_LINKS)


@pytest.mark.parametrize("lookup, flag", [(hardware.get_gpu, "--gpu"),
                                          (hardware.get_network, "--interconnect"),
                                          (hardware.get_intra, "--intra")])
def test_unknown_names_list_known_ones(lookup, flag):
    with pytest.raises(PlanError) as err:
        lookup("warp-drive")
    message = str(err.value)
    assert flag in message and "warp-drive" in message and "Fix:" in message
    assert isinstance(err.value, ValueError)


def test_peak_rates_per_precision():
    a100 = hardware.get_gpu("a100-40gb")
    assert hardware.peak_flops(a100, "tf32") == 156e12
    assert hardware.peak_flops(a100, "mixed_bfloat16") == 312e12
    v100 = hardware.get_gpu("v100-16gb")
    assert hardware.peak_flops(v100, "tf32") == hardware.peak_flops(v100, "fp32")   # no TF32
    with pytest.raises(PlanError, match="mixed_float16"):
        hardware.peak_flops(v100, "mixed_bfloat16")
    with pytest.raises(PlanError, match="--precision"):
        hardware.check_precision("int8")


def test_effective_bandwidths():
    # DGX A100: ~234 GB/s NVLink allreduce busbw; one HDR port ~22.5 GB/s.
    assert hardware.get_intra("nvlink3").busbw / 1e9 == pytest.approx(234, rel=0.01)
    assert hardware.get_network("ib-hdr").busbw / 1e9 == pytest.approx(22.5)
    assert hardware.get_network("tcp-10g").busbw < hardware.get_network("roce-25g").busbw


def test_tf32_capability_follows_the_architecture():
    for gpu in hardware.GPUS.values():
        assert gpu.arch in hardware.ARCHITECTURES
        assert gpu.has_tf32 == (gpu.tf32_tflops is not None), gpu.name
    assert hardware.get_gpu("l4-24gb").has_tf32 and hardware.get_gpu("h100-80gb").has_tf32
    assert not hardware.get_gpu("v100-16gb").has_tf32


def test_fp32_runs_as_tf32_where_tensorflow_does():
    # TF enables TF32 by default: on Ampere and later an fp32 run's matmuls are TF32.
    a100, v100 = hardware.get_gpu("a100-40gb"), hardware.get_gpu("v100-16gb")
    assert hardware.peak_flops(a100, "fp32") == hardware.peak_flops(a100, "tf32") == 156e12
    assert hardware.peak_flops(a100, "fp32_strict") == 19.5e12
    assert hardware.peak_flops(v100, "fp32") == hardware.peak_flops(v100, "fp32_strict") == 15.7e12


def test_fp32_warning_only_where_tf32_changes_the_math():
    warning = hardware.tf32_warning(hardware.get_gpu("l4-24gb"), "fp32")
    assert "TF32" in warning and "enable_tensor_float_32_execution" in warning
    assert "--precision fp32_strict" in warning
    for gpu, precision in (("v100-16gb", "fp32"), ("a100-40gb", "tf32"),
                           ("a100-40gb", "fp32_strict"), ("a100-40gb", "mixed_bfloat16")):
        assert hardware.tf32_warning(hardware.get_gpu(gpu), precision) is None
