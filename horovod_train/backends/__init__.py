"""Backend registry. TF-free: factories import their backend module when called, so
--backend=mwms never loads Horovod's native library and vice versa."""
import importlib

from horovod_train.env import LaunchInfo
from horovod_train.errors import UsageError

_FACTORIES = {
    "horovod": "horovod_train.backends.horovod:HorovodBackend",
    "local": "horovod_train.backends.local:LocalBackend",
    "mwms": "horovod_train.backends.mwms:MwmsBackend",
}


def available_backends() -> list[str]:
    return sorted(_FACTORIES)


def resolve(name: str, launch: LaunchInfo, environ=None) -> str:
    """Turns 'auto' into a concrete backend from how this process was launched."""
    import os
    from horovod_train.env import MWMS_PORT_BASE
    environ = os.environ if environ is None else environ
    if name != "auto":
        return name
    # `python -m launch --backend mwms` starts ranks with mpirun and exports the mwms
    # port base for them: that, not the MPI launcher, says which backend was meant.
    if launch.is_distributed_launch and MWMS_PORT_BASE in environ:
        return "mwms"
    if launch.is_distributed_launch:
        return "horovod"
    if launch.launcher == "tf_config" and "mwms" in _FACTORIES:
        return "mwms"
    return "local"


def create(name: str, **options):
    if name not in _FACTORIES:
        raise UsageError(f"--backend: received {name!r}; expected one of: "
                         f"{', '.join(['auto'] + available_backends())}. "
                         f"Fix: pass --backend=auto")
    module_name, cls_name = _FACTORIES[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)(**options)
