"""`python -m horovod_train.plan ...` (the lead wires `python -m horovod_train plan`)."""
import sys

from horovod_train.plan.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
