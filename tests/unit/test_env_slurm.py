"""Rank discovery under Slurm, from the variables srun really sets (Slurm 22.05; the
dicts are tests/slurm_envs.py's)."""
import pytest
from slurm_envs import batch_step, srun_task

from horovod_train import env
from horovod_train.errors import UsageError


def seen(variables):
    info = env.launch_info(variables)
    return info.launcher, info.rank, info.size, info.local_rank, info.local_size


# ---- srun's tasks -----------------------------------------------------------------
@pytest.mark.parametrize("procid", [0, 1])
def test_srun_n2_without_ntasks_per_node_sees_two_local_ranks(procid):
    """srun -n 2 on one node: SLURM_NTASKS_PER_NODE is not set; the step's layout is."""
    variables = srun_task(procid, 0, procid, "2", "n1")
    assert "SLURM_NTASKS_PER_NODE" not in variables
    assert seen(variables) == ("srun", procid, 2, procid, 2)


def test_srun_with_ntasks_per_node_agrees():
    variables = srun_task(1, 0, 1, "2", "n1", SLURM_NTASKS_PER_NODE="2")
    assert seen(variables) == ("srun", 1, 2, 1, 2)


@pytest.mark.parametrize("procid", [0, 1])
def test_two_nodes_one_task_each(procid):
    variables = srun_task(procid, procid, 0, "1(x2)", "n[1-2]")
    assert seen(variables) == ("srun", procid, 2, 0, 1)
    step = env.slurm_step(variables)
    assert (step.node_index, step.nodes, step.tasks_per_node) == (procid, ("n1", "n2"), (1, 1))


@pytest.mark.parametrize("procid, nodeid, localid, local_size", [
    (0, 0, 0, 3), (2, 0, 2, 3), (3, 1, 0, 2), (4, 1, 1, 2)])
def test_uneven_three_and_two(procid, nodeid, localid, local_size):
    """srun -n 5 over two 3- and 2-slot nodes: each node's own count, not the first."""
    variables = srun_task(procid, nodeid, localid, "3,2", "n[1-2]")
    assert seen(variables) == ("srun", procid, 5, localid, local_size)
    assert env.slurm_step(variables).hosts() == ["n1", "n1", "n1", "n2", "n2"]


def test_compressed_counts_and_hostlists():
    variables = srun_task(7, 4, 0, "2(x3),1,2", "n[1-3,5],gpu-a[01]")
    step = env.slurm_step(variables)
    assert step.nodes == ("n1", "n2", "n3", "n5", "gpu-a01")
    assert step.tasks_per_node == (2, 2, 2, 1, 2)
    assert seen(variables) == ("srun", 7, 9, 0, 2)


def test_a_step_on_part_of_the_allocation_uses_the_steps_nodes():
    """srun -N 1 -n 2 inside a 2-node job: SLURM_JOB_NODELIST still names both nodes."""
    variables = srun_task(1, 0, 1, "2", "n2", SLURM_JOB_NODELIST="n[1-2]",
                          SLURM_TASKS_PER_NODE="2(x2)", SLURM_NTASKS="4")
    assert seen(variables) == ("srun", 1, 2, 1, 2)
    assert env.slurm_step(variables).hosts() == ["n2", "n2"]


def test_a_one_task_step_of_a_bigger_job_is_one_process():
    variables = srun_task(0, 0, 0, "1", "n1", SLURM_NTASKS="4")
    assert seen(variables) == ("none", 0, 1, 0, 1)  # srun -n 1 (or --preserve-env)


def test_a_one_task_step_is_one_process():
    info = env.launch_info(srun_task(0, 0, 0, "1", "n1"))
    assert info.launcher == "none" and not info.is_distributed_launch


# ---- PMI and MPI beside srun -------------------------------------------------------
def test_srun_pmi2_takes_slurms_local_rank():
    """srun --mpi=pmi2: PMI_RANK/PMI_SIZE are Slurm's own and MPI_LOCALRANKID is unset,
    so the MPICH reading would give every rank local rank 0 (GPU 0 for all)."""
    variables = srun_task(3, 1, 1, "2(x2)", "n[1-2]", PMI_RANK="3", PMI_SIZE="4",
                          PMI_FD="7", PMI_JOBID="41.0")
    assert seen(variables) == ("srun", 3, 4, 1, 2)


def test_srun_pmix_task():
    variables = srun_task(2, 1, 0, "2(x2)", "n[1-2]", PMIX_RANK="2",
                          PMIX_NAMESPACE="slurm.pmix.41.0")
    assert seen(variables) == ("srun", 2, 4, 0, 2)


def test_mpich_hydra_under_an_srun_step_of_its_proxies_keeps_its_own_numbers():
    """mpiexec inside sbatch starts one proxy per node with srun: the step is the
    proxies' (2 tasks), the ranks are Hydra's (4)."""
    variables = srun_task(1, 1, 0, "1(x2)", "n[1-2]", PMI_RANK="3", PMI_SIZE="4",
                          MPI_LOCALRANKID="1", MPI_LOCALNRANKS="2")
    assert seen(variables) == ("mpich", 3, 4, 1, 2)


def test_open_mpi_under_an_srun_step_of_its_daemons_keeps_its_own_numbers():
    variables = srun_task(1, 1, 0, "1(x2)", "n[1-2]", OMPI_COMM_WORLD_RANK="3",
                          OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_RANK="1",
                          OMPI_COMM_WORLD_LOCAL_SIZE="2")
    assert seen(variables) == ("mpirun", 3, 4, 1, 2)


def test_pmi_alone_is_mpich():
    assert seen({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0",
                 "MPI_LOCALNRANKS": "1"}) == ("mpich", 2, 3, 0, 1)


def test_gpus_per_task_binding_counts_for_pmi2_tasks():
    variables = srun_task(3, 1, 1, "2(x2)", "n[1-2]", PMI_RANK="3", PMI_SIZE="4",
                          SLURM_GPUS_PER_TASK="1")
    assert env.gpus_bound_per_task(variables)


# ---- the job's own shell is never a rank -------------------------------------------
@pytest.mark.parametrize("variables", [
    batch_step(),
    batch_step(SLURM_STEP_ID="batch"),
    batch_step(SLURM_STEP_ID="4294967291", SLURM_STEPID="4294967291"),  # SLURM_BATCH_SCRIPT
    batch_step(SLURM_STEP_ID="-5"),
    # sbatch run from inside an srun step exports that step's variables into the job.
    batch_step(SLURM_STEP_ID="batch", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST="n1",
               SLURM_STEP_TASKS_PER_NODE="2"),
    # salloc -n 2's shell (no SLURM_PROCID), and its interactive step.
    {k: v for k, v in batch_step().items() if k not in ("SLURM_PROCID", "SLURM_LOCALID")},
    batch_step(SLURM_STEP_ID="4294967290", SLURM_STEP_NUM_TASKS="1",
               SLURM_STEP_NODELIST="n1", SLURM_STEP_TASKS_PER_NODE="1"),
], ids=["sbatch", "step-id-batch", "step-id-4294967291", "step-id-negative",
        "leaked-step-vars", "salloc-shell", "interactive-step"])
def test_the_batch_step_of_a_two_task_job_is_refused(variables):
    """sbatch -n 2 --wrap 'python -m horovod_train' trained ONE process that believed it
    was rank 0 of 2, and exited 0."""
    with pytest.raises(UsageError) as err:
        env.launch_info(variables)
    message = str(err.value)
    assert "\n" not in message
    assert "received" in message and "SLURM_NTASKS=2" in message
    assert "expected" in message and "srun" in message
    assert "Fix: run it under srun" in message and "python -m launch slurm" in message


@pytest.mark.parametrize("variables", [batch_step(ntasks="1"), batch_step(ntasks=None)],
                         ids=["ntasks-1", "no-ntasks"])
def test_a_one_task_batch_job_runs_one_process(variables):
    assert seen(variables) == ("none", 0, 1, 0, 1)


def test_a_batch_step_with_its_own_launcher_is_that_launcher():
    """mpirun, horovodrun or a TF_CONFIG written in the script start the ranks there."""
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert seen(batch_step(**ompi)) == ("mpirun", 1, 2, 1, 2)
    assert seen(batch_step(HOROVOD_RANK="1", HOROVOD_SIZE="2"))[:3] == ("horovodrun", 1, 2)
    tf_config = '{"cluster": {"worker": ["n1:1", "n1:2"]}, "task": {"type": "worker", "index": 1}}'
    assert seen(batch_step(TF_CONFIG=tf_config)) == ("tf_config", 1, 2, 1, 2)


# ---- malformed or inconsistent step variables: one usage line, exit 2 --------------
@pytest.mark.parametrize("change, name, expected", [
    ({"SLURM_STEP_NUM_TASKS": "two"}, "SLURM_STEP_NUM_TASKS", "a positive integer"),
    ({"SLURM_LOCALID": "-1"}, "SLURM_LOCALID", "a non-negative integer"),
    ({"SLURM_STEP_TASKS_PER_NODE": "x(x2)"}, "SLURM_STEP_TASKS_PER_NODE", "'N' or 'N(xR)'"),
    ({"SLURM_STEP_NODELIST": "n[1-"}, "SLURM_STEP_NODELIST", "every '[' closed"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2,1,1"}, "SLURM_STEP_TASKS_PER_NODE",
     "one count per node of SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NUM_TASKS": "3"}, "SLURM_STEP_NUM_TASKS",
     "the sum of SLURM_STEP_TASKS_PER_NODE"),
    ({"SLURM_PROCID": "4"}, "SLURM_PROCID", "a rank below SLURM_STEP_NUM_TASKS"),
    ({"SLURM_NODEID": "2"}, "SLURM_NODEID", "a node index below"),
    ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID", "a local rank below"),
    ({"SLURM_STEP_NUM_NODES": "3"}, "SLURM_STEP_NUM_NODES", "the number of nodes"),
])
def test_bad_step_variables_are_named(change, name, expected):
    variables = srun_task(3, 1, 1, "2(x2)", "n[1-2]")
    variables.update(change)
    with pytest.raises(UsageError) as err:
        env.launch_info(variables)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"environment variable {name}: received {change[name]!r}")
    assert expected in message and "Fix: " in message


def test_a_missing_step_variable_is_named():
    variables = srun_task(1, 0, 1, "2", "n1")
    del variables["SLURM_STEP_TASKS_PER_NODE"]
    with pytest.raises(UsageError) as err:
        env.launch_info(variables)
    message = str(err.value)
    assert message.startswith("environment variable SLURM_STEP_TASKS_PER_NODE: not set; "
                              "expected a value (srun sets it in every task of a step)")
    assert "None" not in message and "\n" not in message
    assert "Fix: start the ranks with srun" in message


# ---- srun without an MPI plugin (horovod needs one to wire its ranks) ---------------

def test_srun_without_an_mpi_plugin_is_named_before_mpi_init():
    """srun -n 2 with MpiDefault=none: no PMIx/PMI variables; Open MPI would abort every
    rank in MPI_Init with a page of text. Refused first, naming srun --mpi=pmix."""
    bare = srun_task(1, 0, 1, "2", "n1")
    with pytest.raises(UsageError, match=r"srun --mpi=pmix"):
        env.check_mpi_wired(bare)
    env.check_mpi_wired(srun_task(1, 0, 1, "2", "n1", PMIX_RANK="1"))  # srun --mpi=pmix
    env.check_mpi_wired(srun_task(1, 0, 1, "2", "n1", PMI_RANK="1"))  # srun --mpi=pmi2
    env.check_mpi_wired(srun_task(0, 0, 0, "1", "n1"))  # one task: no wire-up needed
    env.check_mpi_wired({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                         "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})


def test_step_variables_without_a_step_id_are_taken_as_sruns():
    """Some Slurm setups leave SLURM_STEP_ID out of a task's environment: the step's own
    layout variables still say which task this is."""
    variables = srun_task(1, 0, 1, "2", "n1")
    del variables["SLURM_STEP_ID"]
    assert seen(variables) == ("srun", 1, 2, 1, 2)
