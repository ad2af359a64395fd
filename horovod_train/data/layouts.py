"""An epoch trained under more than one layout, and how its rest is read exactly. TF-free.

A layout is how an epoch's examples were being read: by how many ranks, each taking how
many examples per optimizer step. In-memory sets are cut into global batches, so any
layout with the same global batch reads the same examples in the same order and a
resume simply skips the steps done (pipeline.epoch_batches). A record source (TFRecord,
LMDB, TFDS) reads per rank: each rank its own files or keys, through its own seeded shuffle.
What it trained of an epoch is then a function of the layout: rank r of N took the
first k records of its shard's order. A checkpoint therefore records, besides the
position, the layouts of the current epoch so far (`Layout`, in order), and a relaunch
in another layout rebuilds the set of records already trained by replaying those
orders on record ids (rest.trained_mask), then reads the epoch's other
records under its own layout (the source's train_dataset(..., trained=mask)). Each
record of the epoch is trained once across the change; the steps left are
(examples - trained) // global batch, as in an epoch of that many records.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Layout:
    world_size: int
    step_batch: int  # examples per rank per optimizer step (micro-batch x accumulation)
    examples: int  # the epoch's examples trained in this layout, all ranks together

    def __post_init__(self):
        if min(self.world_size, self.step_batch) < 1 or self.examples < 0 or \
                self.examples % (self.world_size * self.step_batch):
            raise ValueError(f"layout {self}: expected whole global batches of examples")

    @property
    def per_rank(self) -> int:
        return self.examples // self.world_size


def same_shape(layout: Layout, world_size: int, step_batch: int) -> bool:
    return (layout.world_size, layout.step_batch) == (world_size, step_batch)


def closing(earlier: tuple, world_size: int, step_batch: int, epoch_examples: int) -> tuple:
    """The epoch's layouts so far: `earlier` (those before this launch), then this launch's
    own with the examples it trained; what a checkpoint records."""
    own = epoch_examples - sum(layout.examples for layout in earlier)
    if own <= 0:
        return tuple(earlier)
    return (*earlier, Layout(world_size, step_batch, own))


def to_record(layouts) -> list:
    return [[layout.world_size, layout.step_batch, layout.examples] for layout in layouts]


def from_record(position: dict, writer: Layout) -> tuple:
    """The layouts a checkpoint's meta position records; a position recorded without
    them (older checkpoints) was trained in one layout, the writer's (`writer`, its
    world size and step batch with the position's examples)."""
    recorded = (position or {}).get("layouts")
    examples = (position or {}).get("epoch_examples", 0)
    if isinstance(recorded, list):
        try:
            layouts = tuple(Layout(*map(int, entry)) for entry in recorded)
        except (TypeError, ValueError):
            layouts = None
        if layouts is not None and sum(lay.examples for lay in layouts) == examples:
            return layouts
    if not examples:
        return ()
    return (dataclasses.replace(writer, examples=examples),)


def needs_rest(layouts: tuple, world_size: int, step_batch: int) -> bool:
    """Whether a record source must read the rest of the epoch exactly: the epoch is part
    trained, and not all of it in this launch's layout (then skipping the steps done of
    this layout's own order is exact, and cheaper)."""
    if not layouts:
        return False
    return len(layouts) > 1 or not same_shape(layouts[0], world_size, step_batch)


def steps_left(num_examples: int, trained: int, global_batch: int) -> int:
    """Optimizer steps left in an epoch of `num_examples` with `trained` of them done:
    the drop-remainder rule of a whole epoch, applied to its untrained records."""
    return (num_examples - trained) // global_batch
