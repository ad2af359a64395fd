"""The planner's one error type.

PlanError is a horovod_train.errors.UsageError (so a ValueError): cli.main prints its
one-line message (received / expected / fix) and returns 2, with no traceback.
"""
from horovod_train.errors import UsageError, usage_error


class PlanError(UsageError):
    """Bad planner input; str(err) is the whole one-line message."""


def plan_error(what: str, received, expected: str, fix: str) -> PlanError:
    return usage_error(what, received, expected, fix, kind=PlanError)  # the trainer's wording


def unknown_name(what: str, received: str, known, flag: str) -> PlanError:
    listed = ", ".join(sorted(known))
    return plan_error(what, received, f"one of: {listed}", f"pass {flag} <one of those names>")
