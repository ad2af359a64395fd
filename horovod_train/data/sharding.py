"""Which examples each rank reads. TF-free, numpy only.

In-memory sets are sharded by *global batch*: every rank draws the same seeded
permutation for the epoch, cuts it into global batches of batch_size * world_size,
and takes its own slice of each. So
  - shards are disjoint and cover ceil-free floor(N / global_batch) global batches,
  - every rank runs the same number of steps (computed from N, never counted locally),
  - the union of the ranks' step-t batches IS the 1-rank step-t batch of the same
    global size, which makes data-parallel runs comparable to single-process runs.
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    index: int = 0  # this worker's position among input pipelines
    count: int = 1  # number of input pipelines (workers)

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is outside [0, {self.count})")


def steps_per_epoch(num_examples: int, batch_size: int, count: int) -> int:
    return num_examples // (batch_size * count)


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    # A fresh generator per (seed, epoch): reproducible, and reshuffled every epoch.
    return np.random.default_rng([seed, epoch]).permutation(num_examples)


def train_indices(num_examples: int, shard: ShardInfo, batch_size: int, seed: int,
                  epoch: int) -> np.ndarray:
    """This shard's example indices for one epoch, in step order (drop_remainder)."""
    steps = steps_per_epoch(num_examples, batch_size, shard.count)
    perm = epoch_permutation(num_examples, seed, epoch)[: steps * batch_size * shard.count]
    return perm.reshape(steps, shard.count, batch_size)[:, shard.index, :].reshape(-1)


def eval_indices(num_examples: int, shard: ShardInfo) -> np.ndarray:
    """Every example exactly once across shards (no dropping): strided split."""
    return np.arange(shard.index, num_examples, shard.count)
