"""`python -m horovod_train [flags]` - the training program every rank runs.

`python -m horovod_train plan ...` is the cluster planner (TF-free).
Bad input exits with code 2 and one line on stderr, never a traceback.
"""
import os
import sys

from absl import app, flags

from horovod_train import flags as ht_flags
from horovod_train.errors import UsageError

FLAGS = flags.FLAGS


def _fail(message: str):
    print(f"horovod_train: error: {message}", file=sys.stderr)
    sys.exit(2)


def _parse(argv):
    """absl's parser, but a bad flag is a one-line exit 2 like every other bad input."""
    try:
        return FLAGS(argv)
    except flags.Error as err:
        _fail(f"{err}. Fix: see 'python -m horovod_train --helpfull'")


def main(argv):
    if len(argv) > 1:
        _fail(f"unexpected arguments {argv[1:]!r}; flags look like --name=value")
    try:
        config = ht_flags.config_from_flags(FLAGS)
        from horovod_train import loop  # imports TensorFlow: only after validation
        loop.run(config)
    except UsageError as err:
        _fail(str(err))
    except Exception as err:  # noqa: BLE001 - re-raised unless it is one we explain
        _explain_or_raise(err)


def _explain_or_raise(err: Exception):
    """A run that cannot go on gets one line and a distinct exit code, no traceback:
    3 = diverged (change flags), 75 = a peer rank was lost (relaunch to resume)."""
    from horovod_train import watchdog
    from horovod_train.loop import TrainingDiverged
    if isinstance(err, TrainingDiverged):
        print(f"horovod_train: stopped: {err}", file=sys.stderr)
        sys.exit(3)
    lost = watchdog.describe_peer_loss(err)
    if lost is None:
        raise err
    print(f"horovod_train: stopped: {lost}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # os._exit, not sys.exit: interpreter teardown after a broken collective can hang
    # in TF's runtime or print tracebacks from half-closed pools; there is nothing to save.
    os._exit(watchdog.EXIT_PEER_LOST)


def run_main():
    if len(sys.argv) > 1 and sys.argv[1] == "plan":
        from horovod_train.plan.cli import main as plan_main
        sys.exit(plan_main(sys.argv[2:]))
    ht_flags.define_flags()
    app.run(main, flags_parser=_parse)


if __name__ == "__main__":
    run_main()
