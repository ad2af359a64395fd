"""What a training command's flags say about its stop, for the launcher. TF-free.

`horovod_train check FLAGS` validates FLAGS as the trainer does and prints facts(config)
as JSON; `python -m launch slurm` reads them to choose when Slurm signals the job before
its time limit (launch/sbatch.py, signal_seconds). launch/ may not import horovod_train,
so it runs this in a subprocess (launch/__main__.py) instead.
"""
from horovod_train.plan.cost import OPTIMIZER_SLOTS
from horovod_train.plan.errors import PlanError
from horovod_train.plan.models import get_model
from launch.redact import redact

BYTES_PER_VALUE = 4  # a checkpoint stores float32 weights and optimizer slots


def checkpoint_bytes(model: str, optimizer: str) -> int | None:
    """About how many bytes one checkpoint of `model` holds (weights and optimizer slots);
    None for a model the planner has no description of."""
    try:
        params = get_model(model).params
    except PlanError:
        return None
    return int(params * BYTES_PER_VALUE * (1 + OPTIMIZER_SLOTS.get(optimizer, 2)))


def facts(config) -> dict:
    # The answer is printed (the launcher reads it, a user may run `check` by hand) and
    # the launcher takes the path only to name it: shown without credentials.
    return {"model": config.model, "stop_grace_s": config.runtime.stop_grace_s,
            "checkpoint_dir": redact(config.train.checkpoint_dir),
            "checkpoint_bytes": checkpoint_bytes(config.model, config.optim.optimizer)}
