"""Memory and step-time model."""
import dataclasses

import pytest

from horovod_train.plan.comm import Fabric
from horovod_train.plan.cost import (Assumptions, Job, compute, expected_max_z, memory,
                                     predict, straggler_fraction)
from horovod_train.plan.hardware import GIB, get_gpu, get_intra
from horovod_train.plan.models import get_model

A100 = get_gpu("a100-40gb")
RN50 = get_model("resnet50")


def _job(**kw):
    base = dict(model=RN50, precision="mixed_float16", micro_batch=256)
    base.update(kw)
    return Job(**base)


def test_memory_terms():
    mem = memory(_job(), A100, world=8)
    p = RN50.params
    assert mem.params == p * 6            # fp32 master + 16-bit copy
    assert mem.gradients == p * 4
    assert mem.optimizer == p * 4         # momentum: one slot
    assert mem.activations == pytest.approx(256 * (RN50.act_elems_per_sample * 2 + 1000 * 4))
    assert mem.fits and mem.largest_term() == "activations"
    adam = memory(_job(optimizer="adam", accum_steps=4), A100, world=8)
    assert adam.optimizer == p * 8 and adam.gradients == p * 8    # + accumulator


def test_fp32_doubles_activations_and_checkpointing_cuts_them():
    mixed = memory(_job(), A100, 8).activations
    assert memory(_job(precision="tf32"), A100, 8).activations == pytest.approx(2 * mixed, rel=0.01)
    ckpt = memory(_job(checkpointing=True), A100, 8).activations
    assert ckpt < 0.35 * mixed             # 2/sqrt(50) ~ 0.28


def test_compute_scales_with_batch_and_precision():
    small, big = compute(_job(micro_batch=64), A100), compute(_job(micro_batch=256), A100)
    assert 3.5 < big.micro_s / small.micro_s < 4.0          # launch overhead amortises
    tf32 = compute(_job(precision="tf32"), A100)
    assert tf32.micro_s > 1.5 * big.micro_s
    ckpt = compute(_job(checkpointing=True), A100)
    assert ckpt.micro_s == pytest.approx(big.micro_s * 4 / 3, rel=0.02)
    assert 0 < big.mfu < 0.7


def test_straggler_grows_with_ranks_and_shrinks_with_accumulation():
    a = Assumptions()
    assert expected_max_z(1) == 0
    assert expected_max_z(8) == pytest.approx(1.42, abs=0.02)      # tables of normal order statistics
    assert expected_max_z(512) > expected_max_z(64) > expected_max_z(8)
    assert straggler_fraction(256, 16, a) < straggler_fraction(256, 1, a)
    assert straggler_fraction(256, 10 ** 6, a) == pytest.approx(a.device_sigma * expected_max_z(256),
                                                                rel=0.01)


def test_single_gpu_efficiency_is_one_and_more_gpus_cost_something():
    nv = get_intra("nvlink3")
    one = predict(_job(), A100, Fabric(1, 1, nv, None))
    eight = predict(_job(), A100, Fabric(8, 1, nv, None))
    assert one.efficiency == pytest.approx(1.0)
    assert 0.8 < eight.efficiency < 1.0
    assert eight.throughput == pytest.approx(8 * one.throughput * eight.efficiency)


def test_overlap_and_compression_reduce_exposed_comm():
    from horovod_train.plan.hardware import get_network
    fab = Fabric(8, 4, get_intra("nvlink3"), get_network("tcp-25g"))
    base = predict(_job(micro_batch=64), A100, fab)
    fp16 = predict(_job(micro_batch=64, compression="fp16"), A100, fab)
    over = predict(_job(micro_batch=64, overlap=True), A100, fab)
    assert fp16.comm.exposed_s < 0.6 * base.comm.exposed_s
    assert over.comm.exposed_s < base.comm.exposed_s


def test_assumptions_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Assumptions().matmul_efficiency = 1.0
    assert GIB == 2 ** 30
