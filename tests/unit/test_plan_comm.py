"""Allreduce cost: the ring formula, hierarchy, fusion buckets and overlap."""
import pytest

from horovod_train.plan.comm import Fabric, allreduce_seconds, exposed_comm
from horovod_train.plan.hardware import get_intra, get_network

NVLINK, HDR = get_intra("nvlink3"), get_network("ib-hdr")
S = 100e6


def test_single_node_is_the_ring_formula():
    f = Fabric(8, 1, NVLINK, None)
    t, algo = allreduce_seconds(S, f)
    assert t == pytest.approx(2 * 7 / 8 * S / NVLINK.busbw + 2 * 7 * 1e-6)
    assert algo == "ring (intra-node)"
    assert allreduce_seconds(S, Fabric(1, 1, NVLINK, None))[0] == 0


def test_multi_node_sees_the_node_nics_and_picks_the_faster_shape():
    one_nic = Fabric(8, 4, NVLINK, HDR, nics_per_node=1)
    eight = Fabric(8, 4, NVLINK, HDR, nics_per_node=8)
    t1, _ = allreduce_seconds(S, one_nic)
    t8, _ = allreduce_seconds(S, eight)
    # Bound by the one port: hierarchically, 4 node-level rings of 2(n-1)/n * S.
    assert t1 >= 2 * 3 / 4 * S / HDR.busbw
    assert t8 < t1 / 4
    # Tiny messages are latency-bound: hierarchical (2(g-1)+2(n-1) steps) beats the flat ring.
    big = Fabric(8, 64, NVLINK, HDR, nics_per_node=8)
    assert allreduce_seconds(1e3, big)[1] == "hierarchical ring"


def test_no_overlap_runs_fused_buckets_back_to_back():
    """Our patched Horovod starts the cycle when the gradients are submitted; a stock one
    makes them wait for the next cycle, half a cycle on average."""
    f = Fabric(8, 2, NVLINK, HDR)
    res = exposed_comm(300e6, f, fusion_bytes=128 * 2 ** 20, cycle_s=1e-3, overlap_window_s=0)
    assert res.calls == 3
    assert res.exposed_s == pytest.approx(res.busy_s)
    stock = exposed_comm(300e6, f, 128 * 2 ** 20, 1e-3, 0, wakes_on_enqueue=False)
    assert stock.busy_s == res.busy_s and stock.exposed_s == pytest.approx(res.busy_s + 0.5e-3)


def test_a_stock_loop_makes_each_overlapped_piece_wait_for_a_cycle():
    """Small pieces submitted far apart (backprop much longer than their transfer): the
    patched loop sends each at once, so only the last one's transfer is exposed; the stock
    loop sends each at the next cycle start, so the last waits up to a whole cycle."""
    f = Fabric(8, 1, NVLINK, None)
    nbytes, cycle = 64 * 2 ** 20, 5e-3
    one_piece = exposed_comm(4 * 2 ** 20, f, 128 * 2 ** 20, cycle, 0).busy_s
    patched = exposed_comm(nbytes, f, 128 * 2 ** 20, cycle, overlap_window_s=1.0)
    stock = exposed_comm(nbytes, f, 128 * 2 ** 20, cycle, 1.0, wakes_on_enqueue=False)
    assert patched.exposed_s == pytest.approx(one_piece)
    assert one_piece < stock.exposed_s <= one_piece + cycle
    assert stock.calls == patched.calls == 16   # one cycle per piece, in both
    # A longer stock cycle exposes more; a patched one does not care.
    assert exposed_comm(nbytes, f, 128 * 2 ** 20, 20e-3, 1.0, wakes_on_enqueue=False
                        ).exposed_s > stock.exposed_s
    assert exposed_comm(nbytes, f, 128 * 2 ** 20, 20e-3, 1.0).exposed_s == patched.exposed_s


def test_overlap_hides_comm_behind_a_long_backward_pass():
    f = Fabric(8, 2, NVLINK, HDR)
    busy = exposed_comm(S, f, 128 * 2 ** 20, 1e-3, 0).busy_s
    long_bwd = exposed_comm(S, f, 128 * 2 ** 20, 1e-3, overlap_window_s=10 * busy)
    short_bwd = exposed_comm(S, f, 128 * 2 ** 20, 1e-3, overlap_window_s=busy / 10)
    # What stays exposed: the last few gradients, plus up to one cycle of waiting
    # for Horovod's background thread.
    assert long_bwd.exposed_s < 1e-3 + 0.1 * busy
    assert short_bwd.exposed_s > 0.8 * busy
    assert exposed_comm(S, Fabric(1, 1, NVLINK, None), 1, 1e-3, 1.0).exposed_s == 0
