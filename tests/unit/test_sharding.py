"""Shards are disjoint, cover the data once per epoch, and match a 1-rank run."""
import numpy as np
import pytest

from horovod_train.data import sharding


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("num_examples, batch", [(1437, 32), (100, 7), (64, 16)])
def test_train_shards_disjoint_and_cover_full_global_batches(world, num_examples, batch):
    shards = [sharding.train_indices(num_examples, sharding.ShardInfo(r, world), batch, 7, 0)
              for r in range(world)]
    steps = sharding.steps_per_epoch(num_examples, batch, world)
    assert all(len(s) == steps * batch for s in shards)  # every rank, same step count
    union = np.concatenate(shards)
    assert len(np.unique(union)) == len(union)  # disjoint
    # Covered: exactly the first steps*global_batch examples of the epoch permutation.
    perm = sharding.epoch_permutation(num_examples, 7, 0)
    assert set(union) == set(perm[: steps * batch * world])
    assert num_examples - len(union) < batch * world  # only the remainder is dropped


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_eval_shards_cover_every_example_once(world):
    shards = [sharding.eval_indices(103, sharding.ShardInfo(r, world)) for r in range(world)]
    assert sorted(np.concatenate(shards).tolist()) == list(range(103))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_union_of_step_batches_is_the_single_rank_global_batch(world):
    batch, n = 8, 500
    single = sharding.train_indices(n, sharding.ShardInfo(0, 1), batch * world, 3, 1)
    per_rank = [sharding.train_indices(n, sharding.ShardInfo(r, world), batch, 3, 1)
                for r in range(world)]
    for step in range(len(single) // (batch * world)):
        global_batch = single[step * batch * world:(step + 1) * batch * world]
        parts = np.concatenate([p[step * batch:(step + 1) * batch] for p in per_rank])
        assert sorted(global_batch) == sorted(parts)


def test_same_seed_same_order_and_epochs_reshuffle():
    a = sharding.train_indices(200, sharding.ShardInfo(1, 2), 10, 5, 0)
    b = sharding.train_indices(200, sharding.ShardInfo(1, 2), 10, 5, 0)
    c = sharding.train_indices(200, sharding.ShardInfo(1, 2), 10, 5, 1)
    d = sharding.train_indices(200, sharding.ShardInfo(1, 2), 10, 6, 0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


def test_shard_index_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="outside"):
        sharding.ShardInfo(2, 2)
