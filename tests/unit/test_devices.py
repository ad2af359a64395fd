"""One GPU per local rank, and MWMS's collectives, as pure choices (no TF)."""
import dataclasses
import os
import subprocess
import sys

import pytest

from horovod_train import devices, env
from horovod_train.errors import UsageError


def gpus(n):
    return [f"/physical_device:GPU:{i}" for i in range(n)]


# ---- the rule --------------------------------------------------------------------
@pytest.mark.parametrize("per_host", [1, 2, 4, 8])
def test_one_rank_per_gpu_gives_every_rank_its_own(per_host):
    chosen = [devices.choose_gpu(gpus(per_host), rank, per_host) for rank in range(per_host)]
    assert [c.index for c in chosen] == list(range(per_host))
    assert sorted(c.device for c in chosen) == sorted(gpus(per_host))
    assert all(c.uses_gpu and c.idle == 0 for c in chosen)


@pytest.mark.parametrize("per_host", [1, 2, 4, 8])
def test_a_single_process_uses_one_gpu_of_several(per_host):
    choice = devices.choose_gpu(gpus(per_host), 0, 1)
    assert choice.device == "/physical_device:GPU:0"
    assert choice.idle == per_host - 1
    assert ("stay idle" in choice.describe()) == (per_host > 1)


def test_fewer_ranks_than_gpus_take_the_first_ones():
    chosen = [devices.choose_gpu(gpus(8), rank, 2).index for rank in range(2)]
    assert chosen == [0, 1]
    assert devices.choose_gpu(gpus(8), 1, 2).idle == 6


@pytest.mark.parametrize("local_size", [1, 2, 8])
def test_no_gpu_means_cpu_and_nothing_pinned(local_size):
    for rank in range(local_size):
        choice = devices.choose_gpu([], rank, local_size)
        assert (choice.index, choice.device, choice.uses_gpu) == (None, None, False)
        assert "CPU" in choice.describe()


@pytest.mark.parametrize("per_host, ranks", [(1, 2), (2, 4), (4, 8), (8, 16), (2, 3)])
def test_more_ranks_than_gpus_is_refused_on_every_rank_with_one_line(per_host, ranks):
    for rank in range(ranks):  # ranks below the GPU count refuse too: no rank starts alone
        with pytest.raises(UsageError) as err:
            devices.choose_gpu(gpus(per_host), rank, ranks)
        message = str(err.value)
        assert "\n" not in message
        assert f"received {ranks} ranks on this host for {per_host} visible GPU(s)" in message
        assert f"start at most {per_host} rank(s) per host" in message
        assert 'CUDA_VISIBLE_DEVICES=""' in message


@pytest.mark.parametrize("ranks", [1, 2, 8])
def test_a_launcher_bound_gpu_is_used_as_is(ranks):
    # srun --gpus-per-task=1 / per-rank CUDA_VISIBLE_DEVICES: each rank sees its own one.
    for rank in range(ranks):
        choice = devices.choose_gpu(gpus(1), rank, ranks, bound=True)
        assert (choice.index, choice.idle) == (0, 0)
        assert "launcher's binding" in choice.describe()


def test_a_launcher_bound_pair_uses_the_first_and_says_the_other_idles():
    # srun --gpus-per-task=2 with 4 tasks per node: local rank 3 must not ask for GPU 3.
    choice = devices.choose_gpu(gpus(2), 3, 4, bound=True)
    assert (choice.index, choice.idle) == (0, 1)
    assert "--gpus-per-task=1" in choice.describe()


@pytest.mark.parametrize("rank, size", [(2, 2), (-1, 2), (1, 1)])
def test_an_impossible_local_rank_is_refused(rank, size):
    with pytest.raises(UsageError, match=f"received {rank} with local size {size}"):
        devices.choose_gpu(gpus(8), rank, size)


# ---- the binding as the launcher announces it -------------------------------------
SRUN_4 = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
          "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8",
          "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]",
          "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}  # what srun -N 2 -n 8 sets in task 5
OMPI_4 = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}


@pytest.mark.parametrize("variables, bound", [
    ({}, False),
    ({"CUDA_VISIBLE_DEVICES": "3"}, True),
    ({"CUDA_VISIBLE_DEVICES": "GPU-5f8e1c2a-0000-4b5c-9d2e-1a2b3c4d5e6f"}, True),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, False),
    ({"CUDA_VISIBLE_DEVICES": ""}, False),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, False),
    (dict(SRUN_4, SLURM_GPUS_PER_TASK="2"), True),
    (dict(SRUN_4, SLURM_GPUS_PER_TASK="2", SLURM_GPU_BIND="verbose,none"), False),
    (dict(SRUN_4), False),
    # mpirun inside an sbatch --gpus-per-task job inherits the variable, not the binding.
    (dict(OMPI_4, SLURM_PROCID="0", SLURM_NTASKS="8", SLURM_GPUS_PER_TASK="1"), False),
])
def test_gpus_bound_per_task(variables, bound):
    assert env.gpus_bound_per_task(variables) is bound


LAUNCHERS = {  # local rank 1 of 4 on this host, as each launcher announces it
    "horovodrun": {"HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1",
                   "HOROVOD_LOCAL_SIZE": "4"},
    "mpirun": OMPI_4,
    "mpich": {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"},
    "srun": SRUN_4,
}


def choice_for(variables, visible):
    info = env.launch_info(variables)
    return devices.choose_gpu(visible, info.local_rank, info.local_size,
                              env.gpus_bound_per_task(variables))


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_local_rank_from_every_launcher_picks_its_gpu(launcher):
    variables = LAUNCHERS[launcher]
    assert env.launch_info(variables).launcher == launcher
    assert choice_for(variables, gpus(4)).device == "/physical_device:GPU:1"
    assert choice_for(variables, gpus(8)).device == "/physical_device:GPU:1"
    with pytest.raises(UsageError, match="received 4 ranks on this host for 2 visible"):
        choice_for(variables, gpus(2))


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_every_launcher_with_a_per_rank_cuda_visible_devices_keeps_it(launcher):
    variables = dict(LAUNCHERS[launcher], CUDA_VISIBLE_DEVICES="1")
    assert choice_for(variables, gpus(1)).index == 0


# ---- applying it (tf.config faked: it records what TF would be told) ---------------
@dataclasses.dataclass(frozen=True)
class FakeGpu:
    name: str
    device_type: str = "GPU"


class FakeTfConfig:
    def __init__(self, n, initialised=False):
        self.gpus = [FakeGpu(name) for name in gpus(n)]
        self.visible = list(self.gpus)
        self.growth = {}
        self.initialised = initialised
        self.experimental = self

    def list_physical_devices(self, kind):
        assert kind == "GPU"
        return list(self.gpus)

    def get_visible_devices(self, kind):
        return list(self.visible)

    def set_visible_devices(self, device, kind):
        assert kind == "GPU"
        if self.initialised and self.visible != [device]:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = [device]

    def set_memory_growth(self, device, enable):
        if self.initialised and self.growth.get(device) != enable:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[device] = enable


def test_pin_shows_tf_only_its_gpu_with_memory_growth():
    tf_config = FakeTfConfig(4)
    choice = devices.pin_gpu(2, 4, environ={}, tf_config=tf_config)
    assert choice.index == 2
    assert tf_config.visible == [tf_config.gpus[2]]
    assert tf_config.growth == dict.fromkeys(tf_config.gpus, True)


def horovod_users_pinning(tf_config, local_rank):
    """What Horovod's examples do right after hvd.init(), written as users write it."""
    gpus = tf_config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf_config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf_config.experimental.set_visible_devices(gpus[local_rank], "GPU")


@pytest.mark.parametrize("local_rank", [0, 1, 3])
def test_a_horovod_scripts_own_pinning_after_the_join_keeps_working(local_rank):
    """hvd.init() pins first; under mwms TF then creates its devices (the strategy), after
    which TF accepts only settings it already holds: the script's own pinning must be
    exactly ours, memory growth on every GPU included."""
    tf_config = FakeTfConfig(4)
    devices.pin_gpu(local_rank, 4, environ={}, tf_config=tf_config)
    tf_config.initialised = True
    horovod_users_pinning(tf_config, local_rank)
    assert tf_config.visible == [tf_config.gpus[local_rank]]


def test_pin_on_cpu_is_a_no_op():
    tf_config = FakeTfConfig(0)
    tf_config.set_visible_devices = tf_config.set_memory_growth = None  # a call would fail
    assert devices.pin_gpu(0, 2, environ={}, tf_config=tf_config).index is None


def test_pin_follows_a_launcher_binding():
    tf_config = FakeTfConfig(1)
    choice = devices.pin_gpu(3, 4, environ={"CUDA_VISIBLE_DEVICES": "3"}, tf_config=tf_config)
    assert choice.bound and tf_config.visible == [tf_config.gpus[0]]


def test_pin_refuses_before_touching_tf_when_ranks_outnumber_gpus():
    tf_config = FakeTfConfig(2)
    with pytest.raises(UsageError, match="at most 2 rank"):
        devices.pin_gpu(0, 4, environ={}, tf_config=tf_config)
    assert (tf_config.visible, tf_config.growth) == (tf_config.gpus, {})


def test_pin_after_tf_started_fails_for_ranks_that_would_share_gpus():
    tf_config = FakeTfConfig(4, initialised=True)
    with pytest.raises(UsageError) as err:
        devices.pin_gpu(1, 2, environ={}, tf_config=tf_config)
    assert "\n" not in str(err.value) and "before building models" in str(err.value)


def test_pin_after_tf_started_only_warns_a_lone_process():
    tf_config = FakeTfConfig(4, initialised=True)
    assert devices.pin_gpu(0, 1, environ={}, tf_config=tf_config).index == 0
    assert tf_config.visible == tf_config.gpus  # TF kept what it had


def test_pin_again_with_the_same_choice_is_accepted():
    tf_config = FakeTfConfig(2)
    devices.pin_gpu(1, 2, environ={}, tf_config=tf_config)
    tf_config.initialised = True  # e.g. a second run in one process
    assert devices.pin_gpu(1, 2, environ={}, tf_config=tf_config).index == 1


# ---- MWMS collectives --------------------------------------------------------------
@pytest.mark.parametrize("requested, gpu_count, expected", [
    ("auto", 0, "ring"), ("auto", 1, "nccl"), ("auto", 8, "nccl"),
    ("ring", 0, "ring"), ("ring", 8, "ring"), ("nccl", 1, "nccl"), ("nccl", 8, "nccl"),
])
def test_choose_collective(requested, gpu_count, expected):
    assert devices.choose_collective(requested, gpu_count) == expected


def test_nccl_without_a_gpu_is_one_line_with_the_fix():
    with pytest.raises(UsageError) as err:
        devices.choose_collective("nccl", 0)
    message = str(err.value)
    assert "\n" not in message
    assert "received 'nccl' with no GPU" in message and "--collective=ring" in message


def test_an_unknown_collective_is_refused():
    with pytest.raises(UsageError, match="--collective: received 'mpi'"):
        devices.choose_collective("mpi", 1)


def test_devices_imports_no_tensorflow():
    code = ("import sys, horovod_train.devices as d; d.choose_gpu([], 0, 1); "
            "d.choose_collective('auto', 0); print('tensorflow' in sys.modules)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=root)
    assert out.stdout.strip() == "False"
