"""User-facing errors. TF-free.

A UsageError is bad input from the user. The CLI prints its message on one line and
exits with code 2, without a traceback, so every message must stand on its own: what
was received, what was expected, and the exact fix. A message never holds a credential:
the constructor masks every URL's userinfo and secret query values (launch/redact.py),
so each subclass and every place that prints one shows the path without them.
"""
import math
import numbers

from launch.redact import redact  # stdlib only, as this module is
from launch.usage import did_you_mean


class UsageError(ValueError):
    """Bad user input; str(err) is the whole one-line message, credentials masked."""

    def __init__(self, *args):
        super().__init__(*(redact(arg) for arg in args))


class NotSupported(UsageError, NotImplementedError):
    """A call this package refuses where Horovod raises NotImplementedError: a Horovod
    script's own `except NotImplementedError` still catches it."""


def usage_error(what: str, received, expected: str, fix: str, kind=UsageError) -> UsageError:
    """Builds the standard message: `what: received X; expected Y. Fix: Z`; received None
    (nothing was given) reads `what: not given; ...` as in launch, never "received None".
    `kind`: a UsageError subclass (the planner's PlanError)."""
    got = "not given" if received is None else f"received {received!r}"
    return kind(f"{what}: {got}; expected {expected}. Fix: {fix}")


def is_finite_number(value) -> bool:
    """A real, finite number. nan fails every comparison (`nan <= 0` is False) and inf
    passes every lower bound, so a range check alone lets both through."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_positive(what: str, value, fix: str | None = None) -> None:
    if not is_finite_number(value) or value <= 0:
        raise usage_error(what, value, "a finite positive number",
                          fix or f"pass {what}=N with N > 0")


def check_range(what: str, value, low, high=None, *, high_open: bool = False,
                expected: str | None = None, fix: str) -> None:
    """Refuses nan, inf and anything outside low <= value <= high (< high if high_open;
    no upper bound if high is None)."""
    inside = is_finite_number(value) and value >= low and (
        high is None or (value < high if high_open else value <= high))
    if not inside:
        upper = "" if high is None else f" and {'<' if high_open else '<='} {high}"
        raise usage_error(what, value, expected or f"a finite number >= {low}{upper}", fix)


def write_error(flag: str, path: str, err: OSError, fix: str | None = None) -> UsageError:
    """A write the disk refused (full, read-only, a file where a directory should be),
    as one line naming the flag and the path instead of a raw OSError traceback."""
    reason = getattr(err, "strerror", None) or str(err)
    return UsageError(f"{flag}: cannot write {path} ({reason}); expected a writable location "
                      f"with free space. Fix: {fix or f'free space or point {flag} elsewhere'}")


def check_choice(what: str, value, choices) -> None:
    """A value from a fixed list; a near miss gets "did you mean" (launch/usage.py)."""
    if value not in choices:
        listed = ", ".join(sorted(choices))
        hint = did_you_mean(value, sorted(choices), lambda c: f"{what}={c}")
        raise usage_error(what, value, f"one of: {listed}",
                          f"{hint}pass {what}=<one of {listed}>")
