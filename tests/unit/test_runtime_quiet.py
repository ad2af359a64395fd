"""Only the chief talks (runtime.quiet_non_chief), and an elastic ring that re-forms with
another process as its chief gives that process its own level back."""
from absl import logging

from horovod_train import runtime


def test_a_former_non_chief_that_becomes_the_chief_gets_its_level_back():
    before = logging.get_verbosity()
    try:
        logging.set_verbosity(logging.INFO)
        runtime.quiet_non_chief(False)  # a non-chief keeps warnings and errors
        assert logging.get_verbosity() == logging.WARNING
        runtime.quiet_non_chief(False)  # again (a second reset): the user's level is kept
        runtime.quiet_non_chief(True)  # the ring re-formed with this process as chief
        assert logging.get_verbosity() == logging.INFO
        runtime.quiet_non_chief(True)  # a chief that never was quieted: untouched
        assert logging.get_verbosity() == logging.INFO
    finally:
        logging.set_verbosity(before)
