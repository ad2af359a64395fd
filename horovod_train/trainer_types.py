"""What goes into the Trainer (TrainerOptions), where it stands (Position), what keeps
its state on disk (CheckpointKeeper, the plain runs' state keeper: trainer.py says what
a keeper does) and what comes out of it (RunRecord).

The Trainer sees only the options it reads, not the whole RunConfig, so what shapes
the loop is visible in one place; loop.py builds them and writes the summary from the
record, reading nothing else of the Trainer.
"""
import dataclasses
import os

from horovod_train import checkpoint_commit, checkpoint_meta, precision
from horovod_train.data import layouts as layouts_lib


@dataclasses.dataclass(frozen=True)
class TrainerOptions:
    """No defaults: RunConfig's are the only ones (built by from_config)."""
    # The step (step.StepOptions).
    accum_steps: int
    loss_scaling: bool
    inject_nonfinite: tuple | None  # (step, rank)
    jit_compile: bool
    max_nonfinite_steps: int
    # The cadence of the loop; every rank has the same, so collectives line up.
    log_every: int
    eval_at_start: bool
    eval_every_epochs: int
    divergence_check_steps: int
    # The input pipeline and the process.
    eval_batch: int  # examples per evaluation batch on each rank: --batch_size
    seed: int
    data_threads: int
    deterministic: bool  # op determinism: no batch fetched inside the step
    instrument: bool
    collective_timeout_s: float
    stop_grace_s: float
    inject_delay: tuple  # ((phase, seconds, rank), ...): fault injection for tests

    @classmethod
    def from_config(cls, config, jit_compile: bool) -> "TrainerOptions":
        """`jit_compile` is resolved from the config and the devices (config.py)."""
        speed, train, runtime = config.speed, config.train, config.runtime
        return cls(
            accum_steps=speed.grad_accum_steps,
            loss_scaling=precision.uses_loss_scaling(speed.precision),
            inject_nonfinite=speed.injection(), jit_compile=jit_compile,
            max_nonfinite_steps=speed.max_nonfinite_steps, log_every=train.log_every,
            eval_at_start=train.eval_at_start, eval_every_epochs=train.eval_every_epochs,
            divergence_check_steps=train.divergence_check_steps,
            eval_batch=config.data.batch_size, seed=runtime.seed,
            data_threads=config.data.data_threads, deterministic=runtime.deterministic,
            instrument=config.observe.instrument,
            collective_timeout_s=runtime.collective_timeout_s, stop_grace_s=runtime.stop_grace_s,
            inject_delay=runtime.delays())


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What one rank's Trainer.train() leaves for the summary; histories are (step, value)."""
    test_accuracy: float
    steps: int  # optimizer steps done
    per_epoch: int  # steps per epoch on the last grid (an elastic ring's may have changed)
    loss_history: list  # loss averaged over ranks, per logging interval
    accuracy_history: list
    eval_loss_history: list
    skipped_steps: int  # skipped on non-finite gradients
    loss_scale: float  # the final one
    graph_facts: dict  # TrainStep.graph_facts: collectives in the step's graph, XLA
    divergence_checks: int  # cross-rank weight comparisons that passed
    first_step_after_s: float | None  # process start to first step's end; None: no step
    startup_row: list  # startup.StartupClock.row(): seconds per start-up phase (0: none)
    samples_per_sec: float | None  # this rank's metrics.Throughput figure (THE samples/s)
    cpu_s: float  # this rank's CPU seconds over the same intervals
    samples: float  # samples in those intervals
    already_complete: bool  # restored at (or past) the last step: nothing trained


@dataclasses.dataclass(frozen=True)
class Position:
    """Where training stands. The place in an epoch is counted in examples, not steps:
    an elastic ring's step size changes with its world size."""
    step: int = 0  # optimizer steps done
    epoch: int = 0  # epochs completed
    epoch_examples: int = 0  # examples of the current epoch consumed (all ranks together)
    # This attempt starts a launch (not a re-formed ring): --eval_at_start applies, and a
    # position at the end means the run was already complete.
    launch_start: bool = True
    # The epoch's layouts (data/layouts.py) before this launch's own: as restored, all
    # those a checkpoint recorded; once placed, those whose records the rest excludes.
    layouts: tuple = ()


class CheckpointKeeper:
    """The state keeper of plain runs: a checkpoint.Checkpointer (no directory: none).
    `recorded`: (step, its epoch's layouts) of the checkpoint a restore reads, as the
    chief shared its record (loop.py); none when there is none."""

    def __init__(self, checkpointer, grid, recorded=(None, ())):
        self.checkpointer, self.grid = checkpointer, grid  # grid.EpochGrid
        self.saves_on_stop = bool(checkpointer.directory)
        self.recorded = recorded

    def run(self, attempt, pause=None):
        return attempt()

    def restore(self) -> Position:
        step, recorded = self.checkpointer.restore()
        if recorded is not None:  # (epoch, examples): any world size continues from it
            layouts = self.recorded[1] if step == self.recorded[0] else ()
            ckpt = self.checkpointer
            self._check_position(checkpoint_meta.Recorded(
                step, *recorded, ckpt.written_global_batch, ckpt.global_batch_changed, layouts))
            return Position(step, *recorded, layouts=layouts)
        epoch, in_epoch = divmod(step, self.grid.per_epoch)  # older: the same grid wrote it
        return Position(step, epoch, in_epoch * self.grid.examples_per_step)

    def _check_position(self, recorded):
        """A recorded position is one its writer could have reached (not past its
        epoch's end; the step's own epoch where the global batch never changed): checked
        here, where the data's size is known (every rank, on the chief's agreed record)."""
        path = os.path.join(self.checkpointer.directory, checkpoint_commit.name(recorded.step))
        checkpoint_meta.check_against_data(path, recorded, self.grid.num_examples,
                                           self.checkpointer.backend.info.is_chief)

    def after_step(self, position: Position, last: bool):
        grid = self.grid
        layouts = layouts_lib.closing(position.layouts, grid.world_size, grid.step_batch,
                                      position.epoch_examples)
        self.checkpointer.maybe_save(position.step, last=last, position=(
            position.epoch, position.epoch_examples, layouts_lib.to_record(layouts)))

    def facts(self) -> dict:
        resumed = self.checkpointer.resumed
        return {"resumed": resumed} if resumed else {}

    def close(self):
        self.checkpointer.close()
