"""User-facing errors. TF-free.

A UsageError is bad input from the user. The CLI prints its message on one line and
exits with code 2, without a traceback, so every message must stand on its own: what
was received, what was expected, and the exact fix.
"""


class UsageError(ValueError):
    """Bad user input; str(err) is the whole one-line message."""


def usage_error(what: str, received, expected: str, fix: str) -> UsageError:
    """Builds the standard message: `what: received X; expected Y. Fix: Z`."""
    return UsageError(f"{what}: received {received!r}; expected {expected}. Fix: {fix}")


def check_positive(what: str, value, fix: str | None = None) -> None:
    if value is None or value <= 0:
        raise usage_error(what, value, "a positive number",
                          fix or f"pass {what}=N with N > 0")


def check_choice(what: str, value, choices) -> None:
    if value not in choices:
        listed = ", ".join(sorted(choices))
        raise usage_error(what, value, f"one of: {listed}",
                          f"pass {what}=<one of {listed}>")
