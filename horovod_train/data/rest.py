"""The records of an epoch already trained in earlier layouts (layouts.py says why).

Every record source (TFRecord and pycorpus, LMDB, TFDS) says which records each rank
trains, in order: record_ids(shard, step_batch, seed, epoch, trained=None), over ids
0 .. record_id_count - 1. TFRecord and LMDB replay it on ids alone, reading nothing;
TFDS reads the records (tfds_id), its encoded images left undecoded. In-memory sources
need none: they cut an epoch by global batch, so skipping the steps done is exact.
"""
import numpy as np

from horovod_train.data import sharding

REPLAY_BATCH = 1 << 16  # ids per fetch: the replay runs at tf.data's speed, not Python's


def can_replay(data) -> bool:
    return hasattr(data, "record_ids")


def trained_mask(data, layouts, seed: int, epoch: int) -> np.ndarray:
    """A mask over the source's record ids: the records of `epoch` trained in `layouts`
    (in order; each started where the ones before it left off). Every rank computes it
    alike from the same record. ValueError when a layout's ranks did not train disjoint
    records of the expected count (the data changed since the checkpoint)."""
    mask = np.zeros(data.record_id_count, bool)
    for number, layout in enumerate(layouts):
        before = mask.copy() if number else None  # the first layout read a whole epoch
        for rank in range(layout.world_size):
            shard = sharding.ShardInfo(rank, layout.world_size)
            ids = data.record_ids(shard, layout.step_batch, seed, epoch, trained=before)
            got = np.concatenate([np.zeros(0, np.int64), *ids.take(layout.per_rank).batch(
                REPLAY_BATCH).as_numpy_iterator()])
            if len(got) != layout.per_rank or mask[got].any():
                raise ValueError(
                    f"replaying epoch {epoch + 1}'s layout {number + 1} ({layout.world_size} "
                    f"ranks x {layout.step_batch}) gave rank {rank} {len(got)} records "
                    f"({int(mask[got].sum())} trained already), expected {layout.per_rank} "
                    "new ones: the data is not what the checkpoint's run read")
            mask[got] = True
    return mask
