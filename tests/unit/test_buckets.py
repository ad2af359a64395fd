"""The bucketing rule (backends/buckets.py): last gradients first, buckets of at least
the size asked for, every index exactly once."""
import pytest

from horovod_train.backends.buckets import buckets, mib_to_bytes


def test_no_bucket_size_is_one_bucket_in_backprop_order():
    assert buckets([4, 8, 16], 0) == [[2, 1, 0]]
    assert buckets([], 0) == [] and buckets([], 64) == []


def test_buckets_close_once_they_reach_the_size():
    assert buckets([10, 10, 10, 10, 10], 20) == [[4, 3], [2, 1], [0]]
    assert buckets([100, 1, 1, 1], 2) == [[3, 2], [1, 0]]
    assert buckets([5, 5], 1000) == [[1, 0]]


@pytest.mark.parametrize("size", [1, 7, 64, 10 ** 6])
def test_every_index_once_and_only_the_last_bucket_is_short(size):
    sizes = [3, 50, 1, 1, 200, 9, 9, 9, 64]
    out = buckets(sizes, size)
    assert sorted(i for b in out for i in b) == list(range(len(sizes)))
    flat = [i for b in out for i in b]
    assert flat == sorted(flat, reverse=True)
    assert all(sum(sizes[i] for i in b) >= size for b in out[:-1])


def test_mib():
    assert mib_to_bytes(4) == 4 << 20 and mib_to_bytes(0.5) == 1 << 19
