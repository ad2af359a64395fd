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
MAX_EXAMPLES = 10 ** 12  # examples into an epoch (the data's size bounds it at restore)
MAX_WARMUP = 10 ** 15  # a long warmup is only slow (--warmup_epochs has no upper bound)
_SIZE_KEYS = ("world_size", "data.batch_size", "speed.grad_accum_steps")


def global_batch(meta: dict) -> int | None:
    """The writer's global batch: its fingerprint's ranks x batch x accumulation; None
    when an older writer did not record them all."""
    sizes = [(meta.get("fingerprint") or {}).get(key) for key in _SIZE_KEYS]
    if all(type(v) is int and v > 0 for v in sizes):
        return sizes[0] * sizes[1] * sizes[2]
    return None


def _scale_bound(meta: dict) -> int:
    """The rate's multiplier is at most the writer's global batch G: a fresh start's is
    the world size (<= G) or 1, and each allowed change of the global batch multiplies it
    by G_new / G_old (schedules.lr_scale, resume._changed), so it stays G / (the first
    launch's batch x accumulation) or G / G_first. Without the sizes the multiplier is
    not used (no resume on another world size): the largest global batch bounds it."""
    return global_batch(meta) or MAX_RANKS * MAX_BATCH * MAX_BATCH


# A bound that depends on the record: its words in a refusal, and its value.
_BOUNDS = {"step": lambda meta: meta.get("step"),
           "fingerprint's global batch": _scale_bound}


@dataclasses.dataclass(frozen=True)
class Field:
    keys: tuple  # where it sits in meta.json
    kind: type  # int, float (any finite real number), bool, dict or list
    low: float = 0
    high: float | str | None = None  # a str: a bound of the record (_BOUNDS)
    low_open: bool = False
    older: str | None = None  # what a checkpoint without it resumes with; None: required
    warn: bool = True  # say so when absent (False: absent is the common case's value)

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
    Field(("lr_schedule", "scale"), float, 0, "fingerprint's global batch", low_open=True,
          older="the learning rate's multiplier of a fresh start"),
    Field(("lr_schedule", "warmup_steps"), int, 0, MAX_WARMUP,
          older="the warmup of --warmup_epochs"),
    # Set once any launch changed the global batch (--allow_global_batch_change): the
    # step then no longer tells the epoch (check_against_data).
    Field(("global_batch_changed",), bool, older="no change of the global batch", warn=False),
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


def check(meta: dict, path: str, chief: bool) -> None:
    """Refuses (UsageError) the record of the checkpoint at `path` when a value a resume
    reads has the wrong type or is out of range; warns once for each field it lacks that
    an older version did not write, on the chief only (`chief`: this rank is the one
    whose lines speak for the job). `meta`: as checkpoint.read_meta returns it."""
    for field in SCHEMA:
        parent = _parent(meta, field.keys)
        if parent is None:  # its container is absent, and was named
            continue
        value = parent.get(field.keys[-1])
        if value is None:
            _absent(field, value, path, chief)
        elif not _fits(field, value, meta):
            raise refusal(path, field.name, value, _expected(field, meta))
    named = step_of(path)
    if named is not None and meta["step"] != named:
        raise refusal(path, "step", meta["step"], f"{named}, the step its directory is named for")
    _check_position(meta, path)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A checkpoint's position as a restore checks it against the data's size."""
    step: int
    epoch: int
    examples: int  # into the epoch, all ranks together
    global_batch: int  # the writer's (fingerprint); 0: not recorded
    changed: bool = False  # global_batch_changed: the step no longer tells the epoch
    layouts: tuple = ()  # the epoch's data/layouts.Layout entries, the writer's last


def check_against_data(path: str, recorded: Recorded, num_examples: int, chief: bool) -> None:
    """Refuses a position the writer could not have recorded, once the data's size is
    known: past its epoch's end (grid.epoch_ended: the writer begins the next epoch
    then), or, where every step was of the writer's global batch G, anything but
    step = epoch x (N // G) + examples // G (drop remainder: sharding.steps_per_epoch).
    Where the global batch changed, a mismatch is said (chief) and trusted."""
    from horovod_train.grid import epoch_ended  # TF-free, but a sibling layer's
    g, examples = recorded.global_batch, recorded.examples
    last = recorded.layouts[-1].world_size * recorded.layouts[-1].step_batch \
        if recorded.layouts else g or 1
    if epoch_ended(num_examples, examples, last):
        raise refusal(path, "position.epoch_examples", examples,
                      f"at most {num_examples - last} (a global batch of {last} left of the "
                      f"epoch's {num_examples} examples)")
    per_epoch = num_examples // g if g else 0
    if not per_epoch:
        return
    epoch, rest = divmod(recorded.step, per_epoch)
    if (recorded.epoch, examples) == (epoch, rest * g):
        return
    changed = recorded.changed or any(
        lay.world_size * lay.step_batch != g for lay in recorded.layouts)
    if changed:
        if chief:
            logging.warning(
                "checkpoint | %s: position.epoch %d, %d examples in, is not what step %d "
                "gives at a global batch of %d (epoch %d, %d in); the global batch changed "
                "(--allow_global_batch_change), so the record is trusted",
                path, recorded.epoch, examples, recorded.step, g, epoch, rest * g)
        return
    how = (f"at step {recorded.step}, {per_epoch} steps per epoch of {num_examples} "
           f"examples in global batches of {g}: epoch {epoch}, {rest * g} examples in")
    if recorded.epoch != epoch:
        raise refusal(path, "position.epoch", recorded.epoch, f"{epoch} ({how})")
    raise refusal(path, "position.epoch_examples", examples, f"{rest * g} ({how})")


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


def _absent(field: Field, value, path: str, chief: bool) -> None:
    if field.older is None:
        raise refusal(path, field.name, value, _expected(field, {}))
    if chief and field.warn and (path, field.name) not in _WARNED:
        _WARNED.add((path, field.name))
        logging.warning("checkpoint | %s has no %s (an older version wrote it): %s",
                        os.path.join(path, META), field.name, field.older)


def _high(field: Field, meta: dict):
    return _BOUNDS[field.high](meta) if isinstance(field.high, str) else field.high


def _fits(field: Field, value, meta: dict) -> bool:
    if field.kind in (dict, list, bool):
        return isinstance(value, field.kind)
    if field.kind is int and type(value) is not int:  # `is`: a JSON true is no count
        return False
    if not is_finite_number(value):
        return False
    above = value > field.low if field.low_open else value >= field.low
    return above and value <= _high(field, meta)


def _expected(field: Field, meta: dict) -> str:
    if field.kind in (dict, list, bool):
        return f"a JSON {({dict: 'object', list: 'list', bool: 'true or false'})[field.kind]}"
    high = _high(field, meta)
    bound = f" (its {field.high})" if isinstance(field.high, str) else ""
    if field.kind is int:
        return f"an integer from {field.low} to {high}{bound}"
    return f"a finite number > {field.low:g} and <= {high:g}{bound}"


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
        if recorded:
            _check_writer_layout(meta, recorded[-1], path)
        return
    batch = global_batch(meta)
    if batch and examples % batch:
        raise refusal(path, "position.epoch_examples", examples,
                      f"whole global batches of {batch} (its fingerprint's ranks x batch "
                      f"x accumulation)")


def _check_writer_layout(meta: dict, last: list, path: str) -> None:
    """The last layout is the writer's own: a checkpoint is written after a step, and a
    step into an epoch adds the writer's layout (layouts.closing). A fingerprint that
    disagrees names sizes no launch can restore."""
    fingerprint = meta["fingerprint"]
    ranks, batch, accum = (fingerprint.get(key) for key in _SIZE_KEYS)
    if global_batch(meta) is None:
        return
    if ranks != last[0]:
        raise refusal(path, "fingerprint.world_size", ranks,
                      f"{last[0]}, the ranks of its last position.layouts entry {last!r} "
                      f"(the writer's own)")
    if batch * accum != last[1]:
        raise refusal(path, "fingerprint.data.batch_size", batch,
                      f"{last[1]} per rank per step with its {accum} accumulation steps, "
                      f"as its last position.layouts entry {last!r} (the writer's own)")


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
