"""Which CPUs a rank runs on when several ranks share a CPU host. TF-free.

Left alone, the kernel moves every thread of every rank across all cores. With two ranks
on two cores that costs the transport most: a Gloo allreduce is a chain of hand-offs
between a rank's threads (Horovod's, Gloo's event loop, TensorFlow's), and a thread woken
on a core where the other rank is computing waits for that core's next tick. Measured on
2 cores (docs/benchmarks.md, M2 CPU binding): efficiency x1.029 on resnet18_cifar and
x1.056 on digits_cnn under Gloo, the same CPU spent; MPI moves little. The rule is the one MPI
launchers apply with `--map-by slot:PE=n --bind-to core`: local rank r of n gets the r-th
n-th of the host's physical cores (hyperthread siblings stay together).

Only when nobody bound the process already: a launcher that did (mpirun --bind-to core,
srun --cpu-bind, taskset, a cpuset) leaves an affinity mask narrower than the host, and
that mask is kept. GPU hosts are left alone (unmeasured there; Horovod's own advice for
GPUs is --bind-to none).
"""
import os

from horovod_train.errors import usage_error
from launch import contract

BIND_CHOICES = ("auto", "none")
_SYSFS_CPU = "/sys/devices/system/cpu"


def bind_mode(environ=None) -> str:
    """HOROVOD_TRAIN_CPU_BIND: 'auto' (the default) or 'none'."""
    environ = os.environ if environ is None else environ
    value = environ.get(contract.ENV_CPU_BIND, "") or "auto"
    if value not in BIND_CHOICES:
        raise usage_error(f"environment variable {contract.ENV_CPU_BIND}", value,
                          f"one of {', '.join(BIND_CHOICES)}",
                          f"unset it, or export {contract.ENV_CPU_BIND}=none to let ranks "
                          f"run on every core")
    return value


def physical_cores(cpus, sysfs: str = _SYSFS_CPU) -> list[tuple[int, ...]]:
    """`cpus` grouped by physical core (a core's hyperthreads together), cores ordered by
    their lowest CPU. A CPU whose topology is unreadable counts as a core of its own."""
    cores = {}
    for cpu in sorted(cpus):
        key = _core_key(cpu, sysfs)
        cores.setdefault(key if key is not None else ("cpu", cpu), []).append(cpu)
    return sorted((tuple(c) for c in cores.values()), key=lambda c: c[0])


def _core_key(cpu: int, sysfs: str):
    base = os.path.join(sysfs, f"cpu{cpu}", "topology")
    try:
        with open(os.path.join(base, "physical_package_id")) as f:
            package = f.read().strip()
        with open(os.path.join(base, "core_id")) as f:
            return package, f.read().strip()
    except OSError:
        return None


def share(cores: list[tuple[int, ...]], local_rank: int, local_size: int) -> tuple[int, ...] | None:
    """The CPUs of local rank `local_rank` of `local_size`: whole cores, contiguous, as
    even as they divide (the first ranks get one more when they do not). None when there
    is nothing to split: one rank, or fewer cores than ranks."""
    if local_size < 2 or len(cores) < local_size or not 0 <= local_rank < local_size:
        return None
    first = local_rank * len(cores) // local_size
    last = (local_rank + 1) * len(cores) // local_size
    return tuple(cpu for core in cores[first:last] for cpu in core)


def planned(local_rank: int, local_size: int, gpus: int, elastic: bool = False,
            environ=None, allowed=None, online: int | None = None, sysfs: str = _SYSFS_CPU):
    """(CPUs to bind to, or None, and why): the decision without acting on it."""
    if bind_mode(environ) == "none":
        return None, f"not bound ({contract.ENV_CPU_BIND}=none)"
    if elastic:  # ranks come and go, so a local rank's share would not stay its own
        return None, "not bound (elastic)"
    if local_size < 2:
        return None, "not bound (one rank on this host)"
    if gpus:
        return None, "not bound (a GPU host)"
    allowed = set(os.sched_getaffinity(0) if allowed is None else allowed)
    online = os.cpu_count() if online is None else online
    if len(allowed) < (online or 0):
        return None, f"CPU{_s(allowed)} {_span(allowed)} (bound by the launcher)"
    cpus = share(physical_cores(allowed, sysfs), local_rank, local_size)
    if cpus is None:
        return None, f"not bound (fewer cores than the {local_size} ranks on this host)"
    return cpus, f"bound to CPU{_s(cpus)} {_span(cpus)} (local rank {local_rank} of {local_size})"


def bind_process(cpus) -> None:
    """Every thread of this process to `cpus`. sched_setaffinity(0) moves the calling
    thread only; threads started before (by imports) are moved one by one, threads
    started later inherit the mask."""
    os.sched_setaffinity(0, cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread ended meanwhile


def _s(cpus) -> str:
    return "s" if len(cpus) > 1 else ""


def _span(cpus) -> str:
    """'0-3,8' for {0, 1, 2, 3, 8}."""
    cpus, parts = sorted(cpus), []
    for cpu in cpus:
        if parts and cpu == parts[-1][1] + 1:
            parts[-1][1] = cpu
        else:
            parts.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in parts)
