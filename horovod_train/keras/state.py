"""The process's active htk.Strategy, held here and nowhere else.

A process joins one data-parallel job. The first htk.Strategy(...) joins it and becomes
the active strategy; a later Strategy(...) with the same options is that same object
(it joins nothing new), and one with different options is refused, naming them: it
used to keep the first one's options silently.

    htk.state.active()   # the Strategy this process joined, or None
    htk.state.reset()    # forget it: the next Strategy(...) starts anew, with its options

reset() does not leave the job: the backend stays joined (a Horovod ring, MWMS's
collective runtime, which TensorFlow lets a process configure only once). It exists for
tests, notebooks and scripts that create a strategy with other options on purpose.
"""
from horovod_train.errors import UsageError

_ACTIVE = None


def active():
    """The Strategy this process joined, or None."""
    return _ACTIVE


def reset():
    """Forgets the active strategy (see the module docstring)."""
    global _ACTIVE
    _ACTIVE = None


def activate(strategy):
    global _ACTIVE
    _ACTIVE = strategy


def require(what):
    """The active strategy, or an error naming `what` needed one."""
    if _ACTIVE is None:
        raise UsageError(f"{what}: received no htk.Strategy in this process; expected one to "
                         f"reduce over. Fix: create htk.Strategy() first, then wrap with "
                         f"strategy.distributed_optimizer(opt)")
    return _ACTIVE


def joined(requested: dict, call: str):
    """The active strategy when `requested` (its options, defaults filled in) are the
    ones it was created with; None when there is none; a UsageError naming every
    option that differs otherwise."""
    if _ACTIVE is None:
        return None
    differ = differences(_ACTIVE.options, requested)
    if differ:
        raise UsageError(
            f"{call}: received options that differ from the strategy this process already "
            f"joined ({'; '.join(differ)}); expected one job per process, with one set of "
            f"options. Fix: pass the same options as the first htk.Strategy (or use "
            f"htk.state.active()), or call htk.state.reset() before creating one with new ones")
    return _ACTIVE


def differences(joined_options: dict, requested: dict) -> list:
    """'name=requested (joined with value)' for each option the two disagree on. Under
    another backend, the joined one's own options are not the question: only the
    backend and the options asked for are compared."""
    missing = "<unset>"
    keys = set(requested)
    if requested.get("backend") == joined_options.get("backend"):
        keys |= set(joined_options)
    out = []
    for key in sorted(keys, key=_backend_first):
        mine, theirs = requested.get(key, missing), joined_options.get(key, missing)
        if mine != theirs:
            out.append(f"{key}={mine!r} (joined with {theirs!r})")
    return out


def _backend_first(key):
    return (key != "backend", key)
