"""The epoch grid: steps per epoch and the last step, computed in this one place.

Both are functions of the data size, the batch, the world size and the run's length,
which every rank knows identically, so every rank lands on the same grid and the
collectives line up. An elastic ring that re-forms at another size asks for its grid
again (`resized`); nobody else computes one.
"""
import dataclasses

from horovod_train.data import sharding


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

    def resized(self, world_size: int) -> "EpochGrid":
        return epoch_grid(self.num_examples, self.step_batch, world_size, self.epochs,
                          self.max_steps)


def epoch_grid(num_examples: int, step_batch: int, world_size: int, epochs: int,
               max_steps: int = 0) -> EpochGrid:
    per_epoch = sharding.steps_per_epoch(num_examples, step_batch, world_size)
    grid = EpochGrid(per_epoch, 0, epochs, max_steps, num_examples, step_batch, world_size)
    return dataclasses.replace(grid, total=grid.last_step(0, 0, 0))
