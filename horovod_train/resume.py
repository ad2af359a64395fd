"""Resuming a checkpoint on another number of ranks, as the same training.

The update of one optimizer step is the mean gradient over the step's global batch,
G = ranks x --batch_size x accumulation. In-memory sets are cut into global batches of
G from each epoch's seeded permutation (data/sharding.py), so with the same G every
step sees the same examples whatever the number of ranks, and the learning rate and
the loss scale follow the optimizer step. A checkpoint written by N ranks therefore
continues on N' ranks as the same training when N' x b x k' = G for the micro-batch b
of this launch: the accumulation k' is chosen here to keep G, and the learning rate
keeps the multiplier and warmup the checkpoint's run used (schedules.py scales it by
the world size at a fresh start).

When no accumulation keeps G, the resume is refused naming the world sizes and batch
sizes that would; --allow_global_batch_change continues with this launch's own G' and
rescales the learning rate linearly in the global batch (x G'/G), warmup not repeated
(the schedule keeps its warmup in optimizer steps). The data position is kept in
examples either way (trainer_types.Position).

`plan` is a pure function of what the checkpoint recorded (Written) and this launch;
every rank computes it from the chief's copy of the checkpoint's record, so all ranks
agree without touching the directory.
"""
import dataclasses

from horovod_train.errors import UsageError

ALLOW_FLAG = "--allow_global_batch_change"


@dataclasses.dataclass(frozen=True)
class Written:
    """What a checkpoint records of the run that wrote it."""
    step: int
    world_size: int
    batch_size: int  # --batch_size (the micro-batch)
    accum_steps: int
    lr_scale: float  # the multiplier of its learning rate (the world size at a fresh start)
    warmup_steps: int  # its schedule's warmup, in optimizer steps

    @property
    def global_batch(self) -> int:
        return self.world_size * self.batch_size * self.accum_steps


@dataclasses.dataclass(frozen=True)
class Launch:
    """This launch's own sizes, from its flags and its world."""
    world_size: int
    batch_size: int
    accum_steps: int
    lr_scale: float  # what a fresh start would use
    allow_change: bool = False

    @property
    def global_batch(self) -> int:
        return self.world_size * self.batch_size * self.accum_steps


@dataclasses.dataclass(frozen=True)
class Resumption:
    accum_steps: int  # the accumulation this launch trains with
    lr_scale: float  # the learning rate's multiplier
    warmup_steps: int | None  # the schedule's warmup in steps; None: from --warmup_epochs
    change: str | None = None  # the console's words for what changed; None: nothing did
    global_batch_changed: bool = False


def fresh(launch: Launch) -> Resumption:
    return Resumption(launch.accum_steps, launch.lr_scale, None)


def plan(written: Written | None, launch: Launch) -> Resumption:
    """How this launch continues `written` (None: a fresh start). UsageError when the
    global batch cannot be kept and the change is not allowed."""
    if written is None:
        return fresh(launch)
    g = written.global_batch
    if launch.global_batch == g:
        accum = launch.accum_steps
    elif g % (launch.world_size * launch.batch_size) == 0:
        accum = g // (launch.world_size * launch.batch_size)
    elif launch.allow_change:
        return _changed(written, launch)
    else:
        raise refusal(written, launch)
    resumed = Resumption(accum, written.lr_scale, written.warmup_steps)
    if (launch.world_size, launch.batch_size, accum) == \
            (written.world_size, written.batch_size, written.accum_steps):
        return resumed
    return dataclasses.replace(resumed, change=(
        f"{_who(written, launch)}: accumulation {written.accum_steps} -> {accum}, "
        f"global batch {g} kept"))


def _changed(written: Written, launch: Launch) -> Resumption:
    g, g_new = written.global_batch, launch.global_batch
    scale = written.lr_scale * g_new / g
    return Resumption(launch.accum_steps, scale, written.warmup_steps, change=(
        f"{_who(written, launch)}: accumulation {written.accum_steps} -> "
        f"{launch.accum_steps}, global batch {g} -> {g_new} ({ALLOW_FLAG}), learning rate "
        f"x{g_new / g:g} (linear in the global batch), warmup not repeated"),
        global_batch_changed=True)


def _ranks(n: int) -> str:
    return f"{n} rank{'s' if n != 1 else ''}"


def _who(written: Written, launch: Launch) -> str:
    """'written by 2 ranks on 1 rank', with the batch sizes when they differ."""
    if written.batch_size == launch.batch_size:
        return f"written by {_ranks(written.world_size)} on {_ranks(launch.world_size)}"
    return (f"written by {_ranks(written.world_size)} (batch {written.batch_size}) on "
            f"{_ranks(launch.world_size)} (batch {launch.batch_size})")


def _sizes(ranks: int, batch: int, accum: int) -> str:
    return f"{_ranks(ranks)} x batch {batch} x accumulation {accum}"


def working_world_sizes(global_batch: int, batch_size: int, limit: int) -> list[int]:
    """World sizes up to `limit` that keep `global_batch` at micro-batch `batch_size`."""
    if global_batch % batch_size:
        return []
    per_rank = global_batch // batch_size
    return [n for n in range(1, limit + 1) if per_rank % n == 0]


def working_batch_sizes(global_batch: int, world_size: int) -> list[int]:
    """Micro-batches that keep `global_batch` on `world_size` ranks (with accumulation)."""
    if global_batch % world_size:
        return []
    per_rank = global_batch // world_size
    return [b for b in range(1, per_rank + 1) if per_rank % b == 0]


def refusal(written: Written, launch: Launch) -> UsageError:
    g = written.global_batch
    sizes = working_world_sizes(g, launch.batch_size, max(2 * written.world_size, 8))
    batches = working_batch_sizes(g, launch.world_size)
    ways = [f"{', '.join(map(str, sizes))} ranks at --batch_size={launch.batch_size}"] \
        if sizes else []
    if batches:
        ways.append(f"--batch_size in {{{', '.join(map(str, batches[-6:]))}}} on "
                    f"{launch.world_size} ranks")
    return UsageError(
        f"--checkpoint_dir: the checkpoint at step {written.step} was written with global "
        f"batch {g} ({_sizes(written.world_size, written.batch_size, written.accum_steps)}); "
        f"this launch has {_ranks(launch.world_size)} x batch {launch.batch_size}, and no "
        f"accumulation makes {g}. Expected a launch that "
        f"keeps it: {' or '.join(ways) if ways else 'none at this --batch_size'}. Fix: relaunch "
        f"so, or pass {ALLOW_FLAG} to continue with global batch {launch.global_batch} and the "
        f"learning rate scaled by {launch.global_batch}/{g}")
