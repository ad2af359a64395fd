"""The optimizer-state shard layout (--shard_optimizer_state): a pure function of the
shapes, the world size and the bucket size. No TensorFlow."""
import subprocess
import sys

import numpy as np
import pytest

from horovod_train import shard_layout

SHAPES = [(3, 3, 1, 8), (8,), (200, 10), (10,), (0,), (7, 5)]


def _owned(layout, rank):
    """{(variable, element)} rank owns, and its shard as positions -> (variable, element)."""
    owned, where = set(), {}
    for seg in layout.segments(rank):
        for k in range(seg.stop - seg.start):
            owned.add((seg.variable, seg.start + k))
            where[seg.at + k] = (seg.variable, seg.start + k)
    return owned, where


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("bucket_bytes", [0, 100, 4096])
def test_shards_are_disjoint_cover_every_element_and_are_equal(world, bucket_bytes):
    layout = shard_layout.layout(SHAPES, world, bucket_bytes)
    every = {(i, e) for i, s in enumerate(SHAPES) for e in range(int(np.prod(s)))}
    seen = set()
    for rank in range(world):
        owned, where = _owned(layout, rank)
        assert not owned & seen
        seen |= owned
        assert all(0 <= at < layout.shard_elements for at in where)
    assert seen == every
    for bucket in layout.buckets:
        assert bucket.padded % world == 0 and bucket.padded - bucket.used < world
    assert layout.padding < world * len(layout.buckets)
    assert layout.shard_elements * world == layout.elements + layout.padding


def test_flattened_order_matches_concatenated_slices():
    """Rank r's shard is its slice of each bucket laid end to end, as reduce-scatter of
    the bucket's concatenated, padded gradients hands it out."""
    world = 3
    layout = shard_layout.layout(SHAPES, world, 100)
    values = [np.arange(np.prod(s), dtype=np.float64) + 1000 * i for i, s in enumerate(SHAPES)]
    for rank in range(world):
        expected = []
        for bucket in layout.buckets:
            flat = np.concatenate([values[i].ravel() for i in bucket.members])
            flat = np.pad(flat, (0, bucket.padded - bucket.used))
            expected.append(flat[rank * bucket.slice:(rank + 1) * bucket.slice])
        expected = np.concatenate(expected)
        shard = np.zeros(layout.shard_elements)
        for seg in layout.segments(rank):
            shard[seg.at:seg.at + seg.stop - seg.start] = values[seg.variable][seg.start:seg.stop]
        np.testing.assert_array_equal(shard, expected)


def test_buckets_follow_the_gradient_bucket_rule_last_layers_first():
    layout = shard_layout.layout([(10,), (10,), (10,)], 2, 40)
    assert [b.members for b in layout.buckets] == [(2,), (1,), (0,)]
    assert [b.members for b in shard_layout.layout([(10,), (10,)], 2, 0).buckets] == [(1, 0)]


def test_state_bytes_are_about_one_over_n_with_the_padding_stated():
    layout = shard_layout.layout([(1001,), (10,)], 4, 0)
    facts = shard_layout.state_bytes(layout, slots=2)
    assert facts["optimizer_state_bytes_unsharded"] == 2 * 1011 * 4
    assert facts["optimizer_state_padding_elements"] == 1  # 1011 -> 1012
    assert facts["optimizer_state_bytes_per_rank"] == 2 * 253 * 4
    assert layout == shard_layout.layout([(1001,), (10,)], 4, 0)  # pure: same in, same out


def test_no_tensorflow_imported():
    code = "import sys, horovod_train.shard_layout; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("changes, flag", [
    ({"speed": {"compression": "fp16"}}, "--compression"),
    ({"runtime": {"elastic": True}}, "--elastic")])
def test_what_sharding_cannot_do_is_refused_in_one_line(changes, flag):
    from horovod_train import config as cfg
    from horovod_train.errors import UsageError
    sections = {"speed": cfg.SpeedConfig, "runtime": cfg.RuntimeConfig}
    kwargs = {"shard_optimizer_state": True} if "speed" in changes else {}
    with pytest.raises(UsageError, match=f"{flag}: received .*shard_optimizer_state") as err:
        speed = cfg.SpeedConfig(**{**kwargs, **changes.get("speed", {})})
        built = {name: sections[name](**values) for name, values in changes.items()
                 if name != "speed"}
        cfg.RunConfig(speed=speed if "speed" in changes else
                      cfg.SpeedConfig(shard_optimizer_state=True), **built)
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)
