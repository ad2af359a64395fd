"""The process's active htk.Strategy: a job is joined once per process."""
_ACTIVE = None


def active():
    """The Strategy this process joined, or None."""
    return _ACTIVE


def activate(strategy):
    global _ACTIVE
    _ACTIVE = strategy
