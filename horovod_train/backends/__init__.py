"""Backend registry. TF-free: factories import their backend module when called, so
--backend=mwms never loads Horovod's native library and vice versa.

The names are launch/contract.py's BACKENDS (one list for flags, the launcher and the
planner); each backend takes its own typed options, and `create` refuses any other.
"""
import importlib
import inspect
import os

from horovod_train.env import LaunchInfo
from horovod_train.errors import UsageError
from launch import contract

# Backend `x` is class XBackend in module backends/x.py: the list is the contract's.
_FACTORIES = {name: f"horovod_train.backends.{name}:{name.capitalize()}Backend"
              for name in contract.BACKENDS}


def available_backends() -> list[str]:
    return sorted(_FACTORIES)


def resolve(name: str, launch: LaunchInfo, environ=None) -> str:
    """Turns 'auto' into a concrete backend from how this process was launched."""
    environ = os.environ if environ is None else environ
    if name != "auto":
        return name
    # `python -m launch --backend mwms` starts ranks with mpirun and exports the mwms
    # port base for them: that, not the MPI launcher, says which backend was meant.
    if launch.is_distributed_launch and contract.ENV_MWMS_PORT_BASE in environ:
        return "mwms"
    if launch.is_distributed_launch:
        return "horovod"
    if launch.launcher == "tf_config":
        return "mwms"
    return "local"


def backend_class(name: str):
    """The class registered under `name` (imports its module: TensorFlow, maybe Horovod)."""
    if name not in _FACTORIES:
        raise UsageError(f"--backend: received {name!r}; expected one of: "
                         f"{', '.join(contract.BACKEND_CHOICES)}. "
                         f"Fix: pass --backend=auto")
    module_name, cls_name = _FACTORIES[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def options_of(name: str) -> tuple[str, ...]:
    """The option names backend `name` takes (its constructor's keyword arguments)."""
    params = inspect.signature(backend_class(name).__init__).parameters
    return tuple(p for p in params if p != "self")


def create(name: str, **options):
    """Backend `name` with its own options; an option it does not take is refused."""
    cls = backend_class(name)
    accepted = options_of(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) or "no options"
        raise UsageError(f"backend {name!r}: received option(s) {', '.join(unknown)}; expected "
                         f"only the options it takes ({takes}). Fix: drop "
                         f"{', '.join(unknown)}, or choose the backend they belong to")
    return cls(**options)


def create_from_config(name: str, config, timeline_path: str | None = None):
    """Backend `name` with the options it reads from a RunConfig (the CLI's path)."""
    return create(name, **backend_class(name).options_from_config(config, timeline_path))
