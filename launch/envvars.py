"""Environment variables: names, forwarding and the CPU-sharing defaults. Stdlib only.

Every name we put on a command line (`-x NAME`, `-genvlist A,B`, `export NAME=...`)
is checked against ENV_NAME first, so a name can never smuggle in an option or a
shell word. Values never go on a launcher's command line: the launcher inherits them
from its own environment and forwards them by name.
"""
import re

from launch import contract, horovod_build
from launch.errors import launch_error

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Remote ranks need Horovod/NCCL/TF tuning, the same Python (PYTHONPATH, PYTHONHASHSEED...)
# and the same OpenMP threading as the launch shell; PATH and LD_LIBRARY_PATH make the
# remote side find the same interpreter and CUDA libraries. A prefix is forwarded whole
# only where one library owns it. TF_ and PYTHON are shared (Terraform's TF_CLI_CONFIG_FILE,
# TF_VAR_*, TF_LOG; other tools' PYTHON...): from those, only the names TensorFlow and
# Python read. TF_CONFIG is per worker: the launcher sets it, never forwards it.
FORWARD_PREFIXES = ("HOROVOD_", "NCCL_", "OMP_")
FORWARD_ALWAYS = (
    "PATH", "LD_LIBRARY_PATH",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONWARNINGS", "PYTHONFAULTHANDLER",
    "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
    "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_THREAD_MODE",
    "TF_GPU_THREAD_COUNT", "TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC",
    "TF_USE_LEGACY_KERAS", "TF_DUMP_GRAPH_PREFIX", "KERAS_BACKEND",
    contract.ENV_TF_INTRAOP_THREADS, contract.ENV_TF_INTEROP_THREADS, "TF_CPU_ALLOCATOR_USE_BFC",
)


def check_env_name(name, where: str) -> str:
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise launch_error(where, name, "an environment variable name matching "
                           "[A-Za-z_][A-Za-z0-9_]*", "NCCL_DEBUG")
    return name


def check_env_value(value, where: str) -> str:
    """Values may hold any printable text; control characters (NUL, newline) are refused."""
    if not isinstance(value, str):
        raise launch_error(where, value, "a string value", "NCCL_DEBUG=WARN")
    for char in value:
        if (ord(char) < 32 and char != "\t") or ord(char) == 127:
            raise launch_error(where, value, f"a value without control characters "
                               f"(found {char!r})", "NCCL_DEBUG=WARN")
    return value


def parse_env_assignments(items, flag: str = "--env") -> dict[str, str]:
    """['A=1', 'B=x y'] -> {'A': '1', 'B': 'x y'}; errors name the flag."""
    result: dict[str, str] = {}
    for item in items or ():
        name, eq, value = str(item).partition("=")
        if not eq:
            raise launch_error(flag, item, "NAME=VALUE", f"{flag} NCCL_DEBUG=INFO")
        check_env_name(name, f"{flag} {item!r}")
        result[name] = check_env_value(value, f"{flag} {name}")
    return result


def forwarded_names(environ, extra_names=(), additions=None) -> list[str]:
    """Names a launcher must forward to remote ranks, sorted for stable output.

    Taken from `environ` by prefix (invalid names there, e.g. bash's exported
    functions, are skipped since nobody asked for them), plus FORWARD_ALWAYS that are
    set, plus every explicit name (validated: the user asked for those).
    """
    names = {name for name in environ
             if name.startswith(FORWARD_PREFIXES) and ENV_NAME.match(name)}
    names.update(name for name in FORWARD_ALWAYS if name in environ)
    for name in extra_names:
        names.add(check_env_name(name, "forwarded variable"))
    for name in (additions or {}):
        names.add(check_env_name(name, "environment addition"))
    return sorted(names)


def cpu_sharing_env(cores: int, ranks_per_host: int, build=None) -> dict[str, str]:
    """Chosen defaults when several ranks share one host's cores.

    Without them every rank sizes its thread pools to the whole machine, and N ranks
    fight over the same cores (measured up to 3x slower). So each rank gets
    cores // ranks intra-op and OpenMP threads, and the Horovod settings for shared cores
    that suit `build` (default: the Horovod installed here; horovod_build.py). These
    fill only names the user has not set.
    """
    for value, what in ((cores, "cores per host"), (ranks_per_host, "ranks per host")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise launch_error(what, value, "a positive whole number", "--cores_per_host 32")
    threads = str(contract.threads_per_rank(cores, ranks_per_host))
    return {**{name: threads for name in contract.ENV_THREAD_NAMES},
            **horovod_build.cpu_sharing_defaults(build or horovod_build.detect())}


def unset_only(defaults: dict[str, str], environ, explicit=None) -> dict[str, str]:
    """The defaults whose names are neither in `environ` nor given explicitly."""
    explicit = explicit or {}
    return {name: value for name, value in defaults.items()
            if name not in environ and name not in explicit}
