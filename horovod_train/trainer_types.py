"""What goes into the Trainer (TrainerOptions) and what comes out of it (RunRecord).

The Trainer sees only the options it reads, not the whole RunConfig, so what shapes
the loop is visible in one place; loop.py builds them and writes the summary from the
record, reading nothing else of the Trainer.
"""
import dataclasses

from horovod_train import precision


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
    seed: int
    data_threads: int
    deterministic: bool  # op determinism: no batch fetched inside the step
    instrument: bool
    collective_timeout_s: float
    stop_grace_s: float

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
            divergence_check_steps=train.divergence_check_steps, seed=runtime.seed,
            data_threads=config.data.data_threads, deterministic=runtime.deterministic,
            instrument=config.observe.instrument,
            collective_timeout_s=runtime.collective_timeout_s, stop_grace_s=runtime.stop_grace_s)
