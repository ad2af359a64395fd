"""The epoch grid: steps per epoch and the last step, computed in this one place.

Both are functions of the data size, the batch, the world size and the run's length,
which every rank knows identically, so every rank lands on the same grid and the
collectives line up. An elastic ring that re-forms at another size asks for its grid
again (`resized`); nobody else computes one.
"""
import dataclasses

from horovod_train.data import layouts as layouts_lib
from horovod_train.data import sharding


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a run continues on a grid (EpochGrid.place)."""
    epoch: int
    in_epoch: int  # steps of the epoch counted done: its steps left are per_epoch - this
    examples: int  # the position's examples into the epoch
    earlier: tuple = ()  # the epoch's layouts before this launch (set: read its rest exactly)
    repeated: int = 0  # examples of a part global batch trained again (set: no exact rest)

    def note(self, grid: "EpochGrid", epoch_examples: int) -> str | None:
        """The console's words for a position that is not simply continued."""
        if self.earlier:
            return (f"epoch {self.epoch + 1} continues with its "
                    f"{grid.num_examples - self.examples} records not yet trained ("
                    f"{self.examples} were, in other layouts), read by this launch's shards: "
                    f"{grid.per_epoch - self.in_epoch} steps")
        if self.repeated:
            return (f"the position, {epoch_examples} examples into epoch {self.epoch + 1}, is "
                    f"not a whole number of global batches of {grid.examples_per_step}: the "
                    f"last {self.repeated} are trained on again")
        return None


def step_batch(config) -> int:
    """Examples per rank per optimizer step: k micro-batches of --batch_size."""
    return config.data.batch_size * config.speed.grad_accum_steps


@dataclasses.dataclass(frozen=True)
class EpochGrid:
    per_epoch: int  # optimizer steps per epoch at this world size
    total: int  # the last step of a run started from step 0
    epochs: int
    max_steps: int  # 0: no cap
    num_examples: int  # training examples, all ranks together
    step_batch: int  # examples per rank per optimizer step
    world_size: int

    @property
    def examples_per_step(self) -> int:
        return self.step_batch * self.world_size

    def last_step(self, step: int, epoch: int, in_epoch: int) -> int:
        """The last step of a run at `step`, which is `in_epoch` steps into `epoch`."""
        last = step + (self.epochs - epoch) * self.per_epoch - in_epoch
        return min(last, self.max_steps) if self.max_steps else last

    def ended(self, epoch_examples: int) -> bool:
        return epoch_ended(self.num_examples, epoch_examples, self.examples_per_step)

    def place(self, epoch: int, epoch_examples: int, layouts: tuple = (),
              exact_rest: bool = False) -> Placement:
        """Where a run `epoch_examples` into `epoch` continues on this grid. `layouts`:
        the epoch's so far (data/layouts.py); `exact_rest`: the source can read the
        rest of an epoch begun in other layouts (data/rest.py). Otherwise the position
        is rounded down to a whole global batch of this grid."""
        per_epoch, per_step = self.per_epoch, self.examples_per_step
        if exact_rest and layouts_lib.needs_rest(layouts, self.world_size, self.step_batch):
            left = layouts_lib.steps_left(self.num_examples, epoch_examples, per_step)
            if left:
                return Placement(epoch, per_epoch - left, epoch_examples, tuple(layouts))
            return Placement(epoch + 1, 0, 0)
        in_epoch = min(epoch_examples // per_step, per_epoch)
        if per_epoch and in_epoch == per_epoch:  # a grown ring: epoch done
            return Placement(epoch + 1, 0, 0)
        return Placement(epoch, in_epoch, in_epoch * per_step,
                         repeated=epoch_examples % per_step)

    def resized(self, world_size: int) -> "EpochGrid":
        return epoch_grid(self.num_examples, self.step_batch, world_size, self.epochs,
                          self.max_steps)


def epoch_ended(num_examples: int, epoch_examples: int, global_batch: int) -> bool:
    """Whether an epoch this far in is over: fewer than a global batch of its examples
    are left (drop remainder; an epoch resumed in its rest ends alike). The one rule: the
    loop ends its epochs by it, and a restore refuses a recorded position it calls over."""
    return num_examples - epoch_examples < global_batch


def epoch_grid(num_examples: int, step_batch: int, world_size: int, epochs: int,
               max_steps: int = 0) -> EpochGrid:
    per_epoch = sharding.steps_per_epoch(num_examples, step_batch, world_size)
    grid = EpochGrid(per_epoch, 0, epochs, max_steps, num_examples, step_batch, world_size)
    return dataclasses.replace(grid, total=grid.last_step(0, 0, 0))
