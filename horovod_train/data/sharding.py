"""Which examples each rank reads. TF-free, numpy only.

In-memory sets are sharded by *global batch*: every rank draws the same seeded
permutation for the epoch, cuts it into global batches of batch_size * world_size,
and takes its own slice of each. So
  - shards are disjoint and cover floor(N / global_batch) global batches,
  - every rank runs the same number of steps (computed from N, never counted locally),
  - the union of the ranks' step-t batches IS the 1-rank step-t batch of the same
    global size, which makes data-parallel runs comparable to single-process runs.
"""
import dataclasses
import heapq

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


# ---- File-backed sources (TFRecord, LMDB, TFDS) ---------------------------------
# These read per worker, so the in-memory global-batch scheme above does not apply.
# Whatever the mode, each worker holds at least steps_per_epoch * batch_size records,
# because the loop runs that many steps on every rank; a shard with fewer would end
# early and leave the other ranks waiting in a collective forever.


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    mode: str  # "file": open only `files`; "record": read `files`, keep every count-th record
    files: tuple  # indices (into the sorted file list) this worker opens
    records: int  # records this worker yields per epoch, before drop_remainder


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """One int seed per (seed, epoch, salt): tf.data ops take a scalar seed."""
    return int(np.random.default_rng([seed, epoch, salt]).integers(2**31 - 1))


def untrained_counts(counts, trained) -> list[int]:
    """Records per file that the mask `trained` does not mark; file i's records are ids
    sum(counts[:i]) .. + counts[i] (data/layouts.py)."""
    ends = np.cumsum(counts)
    return [int(n - trained[end - n:end].sum()) for n, end in zip(counts, ends)]


def record_share(num_records: int, shard: ShardInfo) -> int:
    """Records of `shard` when records are dealt evenly: the first n % count get one more."""
    return num_records // shard.count + (1 if shard.index < num_records % shard.count else 0)


def record_range(num_records: int, shard: ShardInfo) -> tuple[int, int]:
    """Contiguous [lo, hi) of `shard`, sizes as record_share (LMDB key ranges)."""
    base, extra = divmod(num_records, shard.count)
    lo = shard.index * base + min(shard.index, extra)
    return lo, lo + record_share(num_records, shard)


def deal_files(counts, count: int) -> list[list[int]]:
    """Files to workers, largest first to the least-loaded worker (ties: lowest index).

    Deterministic from the counts alone, so every rank computes the same deal. Ties
    go to the worker with fewer files, so empty files spread out too. A heap keyed by
    (load, files, worker) finds that worker in O(log count), not O(count): 10,000 files
    dealt to 64 workers took 0.2 s (and every rank deals at each epoch and evaluation)."""
    dealt = [[] for _ in range(count)]
    heap = [(0, 0, k) for k in range(count)]  # sorted, so already a heap
    for f in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        load, files, w = heapq.heappop(heap)
        dealt[w].append(f)
        heapq.heappush(heap, (load + counts[f], files + 1, w))
    return [sorted(files) for files in dealt]


def round_robin(num_files: int, count: int) -> list[list[int]]:
    """TFDS's own file deal under ReadConfig(input_context): file i to worker i % count."""
    return [list(range(w, num_files, count)) for w in range(count)]


def _file_plan(counts, shard: ShardInfo, dealt, need: int) -> ReadPlan | None:
    """File-level plan, or None when some worker would get fewer than `need` records."""
    if len(counts) < shard.count:
        return None
    loads = [sum(counts[f] for f in files) for files in dealt]
    if min(loads) < need:
        return None
    return ReadPlan("file", tuple(dealt[shard.index]), loads[shard.index])


def plan_train_read(counts, shard: ShardInfo, batch_size: int, dealt=None) -> ReadPlan:
    """File-level sharding when there are at least as many files as workers AND every
    worker's files hold a full epoch of steps; record-level (every worker reads all
    files and keeps every count-th record) otherwise. `dealt` overrides deal_files."""
    need = steps_per_epoch(sum(counts), batch_size, shard.count) * batch_size
    dealt = dealt if dealt is not None else deal_files(counts, shard.count)
    plan = _file_plan(counts, shard, dealt, need)
    if plan is not None:
        return plan
    return ReadPlan("record", tuple(range(len(counts))), record_share(sum(counts), shard))


def plan_eval_read(counts, shard: ShardInfo, dealt=None) -> ReadPlan:
    """Eval drops nothing and needs no equal step counts: file-level whenever possible."""
    dealt = dealt if dealt is not None else deal_files(counts, shard.count)
    plan = _file_plan(counts, shard, dealt, need=0)
    if plan is not None:
        return plan
    return ReadPlan("record", tuple(range(len(counts))), record_share(sum(counts), shard))
