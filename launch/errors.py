"""The one error type of the launch layer. Standard library only.

A LaunchError is bad user input found before anything is started. `python -m launch`
prints str(err) on one line and exits 2, so every message must stand alone: where the
problem is (file:line or flag), what was received, what was expected, and the fix by
example (the project's one format: launch/usage.py). A message never holds a
credential: the constructor masks URL userinfo and secret query values (launch/redact.py).
"""
from launch.redact import redact


class LaunchError(ValueError):
    """Bad launch input; str(err) is the whole one-line message, credentials masked."""

    def __init__(self, *args):
        super().__init__(*(redact(arg) for arg in args))


def _show(value) -> str:
    # repr() escapes newlines and control characters, so a hostile value can never
    # break the single-line message or inject terminal escapes. Masked before the cut:
    # a URL cut before its '@' is no URL any more, and its secret's first part would show.
    text = redact(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def launch_error(where: str, received, expected: str, example: str) -> LaunchError:
    """Builds `WHERE: received R; expected E. Fix: e.g. X` as a LaunchError; received None
    (nothing was given) reads `WHERE: not given; ...`, never "received None"."""
    got = "not given" if received is None else f"received {_show(received)}"
    return LaunchError(f"{where}: {got}; expected {expected}. Fix: e.g. {example}")
