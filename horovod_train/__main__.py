"""`python -m horovod_train [flags]` - the training program every rank runs.

`python -m horovod_train plan ...` is the cluster planner (TF-free).
Bad input exits with code 2 and one line on stderr, never a traceback.
"""
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
    except RuntimeError as err:
        # A run that cannot go on (diverged): one line and a non-zero exit, no traceback.
        from horovod_train.loop import TrainingDiverged
        if not isinstance(err, TrainingDiverged):
            raise
        print(f"horovod_train: stopped: {err}", file=sys.stderr)
        sys.exit(3)


def run_main():
    if len(sys.argv) > 1 and sys.argv[1] == "plan":
        from horovod_train.plan.cli import main as plan_main
        sys.exit(plan_main(sys.argv[2:]))
    ht_flags.define_flags()
    app.run(main, flags_parser=_parse)


if __name__ == "__main__":
    run_main()
