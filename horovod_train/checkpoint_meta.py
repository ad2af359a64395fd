"""The values of a checkpoint's meta.json that a resume reads, checked for type and range
in this one place. TF-free.

A launch reads a checkpoint's record to plan the resume (the world size and batch sizes
that made its global batch: resume.py), to continue the learning rate (its multiplier and
warmup: schedules.py) and to continue the data (the epoch, the examples into it and the
layouts that trained them: data/layouts.py). The COMMIT marker's CRC proves the file is
whole, not that its values are sane: an older or buggy writer, or a hand repair, can
leave a whole meta.json with a negative position or a NaN multiplier, and trusting it
trains something else in silence or ends in a traceback. So each value is checked here
when read (SCHEMA): a wrong type or a value out of range refuses the checkpoint in one
line naming the field, the value, the range and the fix (UsageError: exit 2); a field an
older version did not write is taken as absent, that version's rule, with a warning.
"""
import dataclasses
import os

from absl import logging

from horovod_train.checkpoint_commit import META, step_of
from horovod_train.data.layouts import Layout
from horovod_train.errors import is_finite_number, usage_error

MAX_STEP = 999_999_999  # a checkpoint's directory name holds nine digits
MAX_RANKS = 100_000  # beyond any data-parallel job: a bigger one is a corrupt record
MAX_BATCH = 1 << 20  # examples per rank per micro-batch, and micro-batches per step
MAX_SCALE = 1e6  # the rate's multiplier: a world size, times the global batch changes
MAX_EXAMPLES = 10 ** 12  # examples into an epoch (the data's size bounds it at restore)
MAX_WARMUP = 10 ** 15  # a long warmup is only slow (--warmup_epochs has no upper bound)


@dataclasses.dataclass(frozen=True)
class Field:
    keys: tuple  # where it sits in meta.json
    kind: type  # int, float (any finite real number), dict or list
    low: float = 0
    high: float | str | None = None  # a str: the value of that (earlier) field
    low_open: bool = False
    older: str | None = None  # what a checkpoint without it resumes with; None: required

    @property
    def name(self) -> str:
        return ".".join(self.keys)


_SIZES = "resumed as if this launch's ranks and batch wrote it"
SCHEMA = (  # containers before their fields; a field before one whose range it bounds
    Field(("step",), int, 0, MAX_STEP),
    Field(("fingerprint", "world_size"), int, 1, MAX_RANKS, older=_SIZES),
    Field(("fingerprint", "data.batch_size"), int, 1, MAX_BATCH, older=_SIZES),
    Field(("fingerprint", "speed.grad_accum_steps"), int, 1, MAX_BATCH, older=_SIZES),
    Field(("lr_schedule",), dict, older="the learning rate of a fresh start"),
    Field(("lr_schedule", "scale"), float, 0, MAX_SCALE, low_open=True,
          older="the learning rate's multiplier of a fresh start"),
    Field(("lr_schedule", "warmup_steps"), int, 0, MAX_WARMUP,
          older="the warmup of --warmup_epochs"),
    Field(("position",), dict, older="the data position counted from the step"),
    # Each epoch takes one step at least: no more epochs are done than steps.
    Field(("position", "epoch"), int, 0, "step", older="the data position counted from the step"),
    Field(("position", "epoch_examples"), int, 0, MAX_EXAMPLES,
          older="the data position counted from the step"),
    Field(("position", "layouts"), list, older="the epoch trained by the writer's ranks alone"),
)

# The key checkpoint.newest_meta adds to the meta it returns: the directory it read, so
# the ranks it is shared with name that one (never written to meta.json).
READ_FROM = "read_from"
_WARNED = set()  # (path, field) already named: one warning each, not one per read


def check(meta: dict, path: str) -> None:
    """Refuses (UsageError) the record of the checkpoint at `path` when a value a resume
    reads has the wrong type or is out of range; warns once for each field it lacks that
    an older version did not write. `meta`: as checkpoint.read_meta returns it."""
    for field in SCHEMA:
        parent = _parent(meta, field.keys)
        if parent is None:  # its container is absent, and was named
            continue
        value = parent.get(field.keys[-1])
        if value is None:
            _absent(field, value, path)
        elif not _fits(field, value, meta):
            raise refusal(path, field.name, value, _expected(field, meta))
    named = step_of(path)
    if named is not None and meta["step"] != named:
        raise refusal(path, "step", meta["step"], f"{named}, the step its directory is named for")
    _check_position(meta, path)


def check_epoch_end(path: str, examples: int, num_examples: int, global_batch: int) -> None:
    """Refuses a position past its epoch's end, once the data's size is known: the writer
    begins the next epoch when less than a global batch is left (grid.EpochGrid.ended),
    so a position records at least one global batch still to train."""
    if examples + global_batch > num_examples:
        raise refusal(path, "position.epoch_examples", examples,
                      f"at most {num_examples - global_batch} (a global batch of "
                      f"{global_batch} left of the epoch's {num_examples} examples)")


def refusal(path: str, name: str, value, expected: str):
    return usage_error(
        f"--checkpoint_dir: {os.path.join(path, META)} field {name}", value, expected,
        f"move {path} aside (out of --checkpoint_dir) to resume from the checkpoint "
        f"before it, or point --checkpoint_dir elsewhere to start afresh")


def _parent(meta: dict, keys: tuple):
    parent = meta
    for key in keys[:-1]:
        parent = parent.get(key)
        if not isinstance(parent, dict):
            return None
    return parent


def _absent(field: Field, value, path: str) -> None:
    if field.older is None:
        raise refusal(path, field.name, value, _expected(field, {}))
    if (path, field.name) not in _WARNED:
        _WARNED.add((path, field.name))
        logging.warning("checkpoint | %s has no %s (an older version wrote it): %s",
                        os.path.join(path, META), field.name, field.older)


def _high(field: Field, meta: dict):
    return meta.get(field.high) if isinstance(field.high, str) else field.high


def _fits(field: Field, value, meta: dict) -> bool:
    if field.kind in (dict, list):
        return isinstance(value, field.kind)
    if field.kind is int and type(value) is not int:  # `is`: a JSON true is no count
        return False
    if not is_finite_number(value):
        return False
    above = value > field.low if field.low_open else value >= field.low
    return above and value <= _high(field, meta)


def _expected(field: Field, meta: dict) -> str:
    if field.kind in (dict, list):
        return f"a JSON {'object' if field.kind is dict else 'list'}"
    high = _high(field, meta)
    bound = f" (its {field.high})" if isinstance(field.high, str) else ""
    if field.kind is int:
        return f"an integer from {field.low} to {high}{bound}"
    return f"a finite number > {field.low:g} and <= {high:g}"


def _check_position(meta: dict, path: str) -> None:
    """The examples into the epoch: whole global batches of the writer, or the sum of the
    layouts that trained them (data/layouts.py)."""
    position = meta.get("position")
    if not isinstance(position, dict) or "epoch_examples" not in position:
        return
    examples, recorded = position["epoch_examples"], position.get("layouts")
    if recorded is not None:
        total = _layouts_total(recorded, path)
        if total != examples:
            raise refusal(path, "position.epoch_examples", examples,
                          f"{total}, the examples its position.layouts {recorded!r} records")
        return
    sizes = [meta["fingerprint"].get(key) for key in
             ("world_size", "data.batch_size", "speed.grad_accum_steps")]
    if all(sizes) and examples % (batch := sizes[0] * sizes[1] * sizes[2]):
        raise refusal(path, "position.epoch_examples", examples,
                      f"whole global batches of {batch} (its fingerprint's ranks x batch "
                      f"x accumulation)")


def _layouts_total(recorded: list, path: str) -> int:
    total = 0
    for entry in recorded:
        if not (isinstance(entry, list) and len(entry) == 3 and all(type(v) is int for v in entry)
                and entry[0] <= MAX_RANKS and _whole(entry)):
            raise refusal(path, "position.layouts", recorded,
                          "a list of [ranks, examples per rank per step, examples] entries, "
                          "each of whole global batches")
        total += entry[2]
    return total


def _whole(entry: list) -> bool:
    try:
        Layout(*entry)
    except ValueError:
        return False
    return True
