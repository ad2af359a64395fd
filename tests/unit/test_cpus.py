"""The CPU-binding rule (horovod_train/cpus.py): whole cores, split by local rank, only
when nobody bound the process already. Pure: fake topologies, masks and environments."""
import os

import pytest

from horovod_train import cpus
from horovod_train.errors import UsageError


def _sysfs(tmp_path, layout):
    """A fake /sys/devices/system/cpu: layout maps cpu -> (package, core)."""
    for cpu, (package, core) in layout.items():
        top = tmp_path / f"cpu{cpu}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text(f"{package}\n")
        (top / "core_id").write_text(f"{core}\n")
    return str(tmp_path)


def test_hyperthread_siblings_stay_on_one_rank(tmp_path):
    # Linux numbers a core's second hyperthread N/2 higher: 0 and 4 share core 0.
    sysfs = _sysfs(tmp_path, {c: (0, c % 4) for c in range(8)})
    cores = cpus.physical_cores(range(8), sysfs)
    assert cores == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert cpus.share(cores, 0, 2) == (0, 4, 1, 5)
    assert cpus.share(cores, 1, 2) == (2, 6, 3, 7)


def test_two_sockets_split_along_the_sockets(tmp_path):
    sysfs = _sysfs(tmp_path, {c: (c // 4, c % 4) for c in range(8)})
    cores = cpus.physical_cores(range(8), sysfs)
    assert [cpus.share(cores, r, 2) for r in range(2)] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_unreadable_topology_counts_each_cpu_as_a_core(tmp_path):
    assert cpus.physical_cores({3, 1, 2}, str(tmp_path)) == [(1,), (2,), (3,)]


@pytest.mark.parametrize("n_cores, local_size, expected", [
    (2, 2, [(0,), (1,)]),
    (3, 2, [(0,), (1, 2)]),               # every core used, the split as even as it goes
    (8, 3, [(0, 1), (2, 3, 4), (5, 6, 7)]),
])
def test_shares_cover_every_core_once(n_cores, local_size, expected):
    cores = [(c,) for c in range(n_cores)]
    got = [cpus.share(cores, r, local_size) for r in range(local_size)]
    assert got == expected
    assert sorted(c for part in got for c in part) == list(range(n_cores))


@pytest.mark.parametrize("n_cores, local_rank, local_size", [(4, 0, 1), (2, 0, 3), (4, 4, 4)])
def test_nothing_to_split(n_cores, local_rank, local_size):
    assert cpus.share([(c,) for c in range(n_cores)], local_rank, local_size) is None


def _plan(tmp_path, **kw):
    args = dict(local_rank=1, local_size=2, gpus=0, environ={}, allowed={0, 1, 2, 3},
                online=4, sysfs=str(tmp_path))
    args.update(kw)
    return cpus.planned(**args)


def test_planned_binds_an_unbound_rank(tmp_path):
    chosen, why = _plan(tmp_path)
    assert chosen == (2, 3) and why == "bound to CPUs 2-3 (local rank 1 of 2)"


@pytest.mark.parametrize("kw, reason", [
    (dict(environ={"HOROVOD_TRAIN_CPU_BIND": "none"}), "HOROVOD_TRAIN_CPU_BIND=none"),
    (dict(elastic=True), "elastic"),
    (dict(local_size=1, local_rank=0), "one rank on this host"),
    (dict(gpus=1), "a GPU host"),
    (dict(allowed={2, 3}), "bound by the launcher"),   # srun --cpu-bind, mpirun --bind-to
    (dict(local_size=5, allowed={0, 1, 2, 3}), "fewer cores than the 5 ranks"),
])
def test_planned_leaves_alone(tmp_path, kw, reason):
    chosen, why = _plan(tmp_path, **kw)
    assert chosen is None and reason in why


def test_bad_mode_names_the_variable_and_the_fix():
    with pytest.raises(UsageError, match=r"HOROVOD_TRAIN_CPU_BIND: received 'off'; expected "
                                         r"one of auto, none\. Fix: .*=none"):
        cpus.bind_mode({"HOROVOD_TRAIN_CPU_BIND": "off"})


def test_span_reads_like_a_cpu_list():
    assert cpus._span({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"


def test_this_hosts_topology_lists_every_allowed_cpu_once():
    allowed = os.sched_getaffinity(0)
    cores = cpus.physical_cores(allowed)
    assert sorted(c for core in cores for c in core) == sorted(allowed)
