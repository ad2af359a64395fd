"""Rank discovery from every launcher's variables, and threads per rank."""
import json

import pytest

from horovod_train import env


# What srun sets in task 9 of `srun -N 2 -n 16` (tests/unit/test_env_slurm.py has more).
SRUN_STEP = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "16",
             "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]",
             "SLURM_STEP_TASKS_PER_NODE": "8(x2)", "SLURM_PROCID": "9", "SLURM_NODEID": "1",
             "SLURM_LOCALID": "1", "SLURM_NTASKS": "16"}


@pytest.mark.parametrize("variables, expected", [
    ({}, ("none", 0, 1, 0, 1)),
    ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
      "HOROVOD_LOCAL_SIZE": "2"}, ("horovodrun", 1, 4, 1, 2)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, ("mpirun", 3, 8, 1, 2)),
    ({"PMI_RANK": "2", "PMI_SIZE": "3"}, ("mpich", 2, 3, 0, 1)),
    (dict(SRUN_STEP, SLURM_PROCID="5", SLURM_LOCALID="5", SLURM_NODEID="0"),
     ("srun", 5, 16, 5, 8)),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2", "c:3"]},
                               "task": {"type": "worker", "index": 2}})}, ("tf_config", 2, 3, 0, 1)),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1", "h:2", "g:1", "h:3"]},
                               "task": {"type": "worker", "index": 3}})}, ("tf_config", 3, 4, 2, 3)),
])
def test_launch_info(variables, expected):
    info = env.launch_info(variables)
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == expected


def test_horovodrun_wins_over_the_mpirun_underneath():
    both = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2"}
    assert env.launch_info(both).launcher == "horovodrun"


def test_single_task_srun_is_not_a_distributed_launch():
    info = env.launch_info(dict(SRUN_STEP, SLURM_STEP_NUM_TASKS="1", SLURM_STEP_NUM_NODES="1",
                                SLURM_STEP_NODELIST="n1", SLURM_STEP_TASKS_PER_NODE="1",
                                SLURM_PROCID="0", SLURM_NODEID="0", SLURM_LOCALID="0"))
    assert not info.is_distributed_launch


def test_bad_integer_names_the_variable():
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_SIZE"):
        env.launch_info({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "two"})


@pytest.mark.parametrize("local_size, cores, expected", [(1, 2, 2), (2, 2, 1), (4, 2, 1),
                                                         (2, 16, 8), (3, 16, 5)])
def test_threads_split_cores_between_local_ranks(local_size, cores, expected):
    assert env.default_intra_op_threads(local_size, cores, {}) == expected


def test_auto_backend_follows_the_launch():
    from horovod_train import backends
    mpi = env.launch_info({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    tfc = env.launch_info({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]},
                                                     "task": {"type": "worker", "index": 0}})})
    assert backends.resolve("auto", mpi, {}) == "horovod"
    assert backends.resolve("auto", mpi, {"HOROVOD_TRAIN_MWMS_PORT_BASE": "12345"}) == "mwms"
    assert backends.resolve("auto", tfc, {}) == "mwms"
    assert backends.resolve("auto", env.launch_info({}), {}) == "local"
    assert backends.resolve("horovod", tfc, {}) == "horovod"


@pytest.mark.parametrize("variables, name, expected", [
    ({"HOROVOD_RANK": "abc"}, "HOROVOD_RANK", "a non-negative integer"),
    ({"HOROVOD_RANK": ""}, "HOROVOD_RANK", "a non-negative integer"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1_0"},
     "HOROVOD_LOCAL_RANK", "a non-negative integer"),
    ({"OMPI_COMM_WORLD_RANK": "-1"}, "OMPI_COMM_WORLD_RANK", "a non-negative integer"),
    ({"OMPI_COMM_WORLD_RANK": " 1"}, "OMPI_COMM_WORLD_RANK", "a non-negative integer"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "0"}, "OMPI_COMM_WORLD_SIZE",
     "a positive integer"),
    ({"PMI_RANK": "1", "PMI_SIZE": "2.5"}, "PMI_SIZE", "a positive integer"),
    (dict(SRUN_STEP, SLURM_PROCID="x"), "SLURM_PROCID", "a non-negative integer"),
    (dict(SRUN_STEP, SLURM_STEP_NUM_TASKS="many"), "SLURM_STEP_NUM_TASKS", "a positive integer"),
    ({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "many"}, "SLURM_NTASKS",
     "a positive integer"),
    (dict(SRUN_STEP, SLURM_STEP_TASKS_PER_NODE="x(x2)"), "SLURM_STEP_TASKS_PER_NODE",
     "'N' or 'N(xR)' entries"),
])
def test_malformed_rank_variable_is_one_usage_line(variables, name, expected):
    """Issue 17 item 14: a usage error (exit 2), not a bare ValueError traceback."""
    from horovod_train.errors import UsageError
    with pytest.raises(UsageError) as err:
        env.launch_info(variables)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"environment variable {name}: received {variables[name]!r}")
    assert f"expected {expected}" in message and "Fix: " in message


def test_the_registry_is_the_contracts_list_of_backends():
    from horovod_train import backends
    from launch import contract
    assert backends.available_backends() == sorted(contract.BACKENDS)
    with pytest.raises(backends.UsageError, match="--backend: received 'tpu'; expected one of: "
                                                  "auto, horovod, mwms, local"):
        backends.create("tpu")


def test_a_backend_refuses_an_option_it_does_not_take():
    """Typed options per backend: a misspelt or foreign option is named, never swallowed."""
    from horovod_train import backends
    assert backends.options_of("local") == ("compression",)
    with pytest.raises(backends.UsageError) as err:
        backends.create("local", compresion="fp16")
    assert str(err.value) == ("backend 'local': received option(s) compresion; expected only "
                              "the options it takes (compression). Fix: drop compresion, or "
                              "choose the backend they belong to")
    with pytest.raises(backends.UsageError, match="received option\\(s\\) collective, "
                                                  "port_base; expected only"):
        backends.create("local", collective="ring", port_base=23456)  # mwms's, not local's
    with pytest.raises(backends.UsageError, match="compression: received 'fp8'"):
        backends.create("local", compression="fp8")


def test_the_base_declares_what_the_loop_reads():
    from horovod_train import backends
    backend = backends.create("local", compression="fp16")
    assert (backend.wire_bytes_per_step, backend.chosen_env, backend.timeline_path) == (0, {}, None)
    assert backend.describe() == "local"
    assert not backend.comm.reaches_peers  # one process: the base communicator
    assert not hasattr(backend, "shutdown")
