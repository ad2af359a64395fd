"""Overlapping the allreduce with backprop can only hide communication.

Horovod performs, in one cycle, every response ready on all ranks, each fused up to
HOROVOD_FUSION_THRESHOLD, one after another; our patched build starts a cycle as soon as
a tensor is submitted (scripts/horovod-patches/README.md). So the overlap model must
never expose more than the same bytes sent back to back after backprop, whatever the
cycle time or the gradients' size against the fusion threshold.
"""
import json

import pytest

from horovod_train.plan.cli import main
from horovod_train.plan.comm import Fabric, exposed_comm
from horovod_train.plan.cost import Job, gradient_bytes, predict
from horovod_train.plan.hardware import get_gpu, get_intra, get_network
from horovod_train.plan.models import get_model, known_models

H100, NVLINK4, NDR = get_gpu("h100-80gb"), get_intra("nvlink4"), get_network("ib-ndr")
MODELS = [m for m in known_models() if not m.startswith("gpt:")]
FABRICS = [Fabric(8, 1, NVLINK4, None), Fabric(8, 4, NVLINK4, NDR), Fabric(1, 2, NVLINK4, NDR),
           Fabric(8, 32, NVLINK4, NDR, nics_per_node=8)]
# (fusion MiB, cycle ms): Horovod's defaults, the docs' decoder example, a tiny threshold.
KNOBS = [(128, 1), (64, 5), (4, 5)]


def _one_split_latency(fabric: Fabric) -> float:
    """Splitting one allreduce in two costs at most one more latency term: the flat
    ring's 2(N-1) steps at the slower hop's latency, the largest of the shapes'."""
    alpha = max(fabric.intra.latency_us, fabric.network.latency_us if fabric.network else 0)
    return 2 * (fabric.world - 1) * alpha * 1e-6


@pytest.mark.parametrize("name", MODELS)
def test_overlap_never_exposes_more_than_no_overlap(name):
    model = get_model(name)
    for fabric in FABRICS:
        for fusion_mb, cycle_ms in KNOBS:
            job = Job(model, "mixed_bfloat16", 8, fusion_bytes=fusion_mb * 2 ** 20,
                      cycle_s=cycle_ms * 1e-3)
            after = predict(job, H100, fabric).comm
            overlapped = predict(Job(**{**job.__dict__, "overlap": True}), H100, fabric).comm
            # Compared with the no-overlap busy time: stricter than its exposed time.
            assert overlapped.exposed_s <= after.busy_s + _one_split_latency(fabric) + 1e-12, (
                name, fabric.world, fusion_mb, cycle_ms, overlapped, after)


def _docs_decoder_plan(capsys, *extra):
    argv = ["--model", "decoder_lm_124m", "--batch-size", "8", "--gpu", "h100-80gb",
            "--precision", "mixed_bfloat16", "--interconnect", "ib-ndr", "--nodes", "1,2,4",
            "--train-samples", "2e6", "--fusion-threshold-mb", "64", "--cycle-time-ms", "5",
            "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["rows"]


def test_docs_decoder_example_overlap_hides_comm(capsys):
    """docs/planning.md's decoder_lm_124m plan (5 ms cycle, 64 MiB fusion, ~498 MB of
    gradients): the default (overlap) exposes less than --allreduce_bucket_mb 0."""
    overlapped = _docs_decoder_plan(capsys)
    after = _docs_decoder_plan(capsys, "--allreduce_bucket_mb", "0")
    for o, a in zip(overlapped, after):
        assert o["comm_exposed_s"] < a["comm_exposed_s"], (o, a)
        assert o["step_s"] < a["step_s"]


def test_long_backprop_short_comm_leaves_almost_nothing_exposed():
    model = get_model("decoder_lm_124m")
    nbytes = gradient_bytes(model, "none")
    fabric = Fabric(8, 1, NVLINK4, None)
    busy = exposed_comm(nbytes, fabric, 64 * 2 ** 20, 5e-3, 0).busy_s
    res = exposed_comm(nbytes, fabric, 64 * 2 ** 20, 5e-3, overlap_window_s=20 * busy)
    # Only the last gradients, sent after backprop ends, stay exposed: a few percent of
    # the busy time, and no cycle wait (the patched loop wakes on the submission).
    assert res.exposed_s < 0.05 * busy


def test_the_horovod_build_chooses_the_loop_model(capsys):
    """--horovod_build: a stock loop (no wake-on-enqueue) exposes more of the same bytes on
    every row; auto is what the Horovod installed here does (launch/horovod_build.py)."""
    from launch import horovod_build
    patched = _docs_decoder_plan(capsys, "--horovod_build", "patched")
    stock = _docs_decoder_plan(capsys, "--horovod_build", "stock")
    for p, s in zip(patched, stock):
        assert s["comm_exposed_s"] > p["comm_exposed_s"], (p, s)
    auto = _docs_decoder_plan(capsys)
    assert auto == (patched if horovod_build.detect().wakes_on_enqueue else stock)
    argv = ["--model", "resnet50", "--batch_size", "32", "--gpu", "a100-80gb"]
    assert main(argv + ["--horovod_build", "stock"]) == 0
    assert "cycle 1 ms (stock horovod)" in capsys.readouterr().out
    assert main(argv + ["--horovod_build", "vanilla"]) == 2
    assert "--horovod_build" in capsys.readouterr().err
