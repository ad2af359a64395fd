"""backends/tf_config under srun: TF_CONFIG derived from the step's own variables.

`srun -n 2 python -m horovod_train --backend=mwms` exited 2 with "Slurm nodelist gives 1
tasks but SLURM_NTASKS=2": the worker list came from SLURM_NTASKS_PER_NODE, which srun
sets only when --ntasks-per-node is given, and from the job's node list, not the step's.
"""
import pytest
from slurm_envs import batch_step, srun_task

from horovod_train.backends import tf_config as tfc
from horovod_train.errors import UsageError

PINNED = {"HOROVOD_TRAIN_MWMS_PORT_BASE": "20000"}


def workers(variables, port_base=12345):
    config = tfc.resolve_tf_config(variables, port_base)
    return config["cluster"]["worker"], config["task"]["index"]


@pytest.mark.parametrize("procid", [0, 1])
def test_srun_n2_on_one_node(procid):
    variables = srun_task(procid, 0, procid, "2", "n1", **PINNED)
    assert workers(variables) == (["n1:20000", "n1:20001"], procid)


def test_two_nodes_one_task_each():
    variables = srun_task(1, 1, 0, "1(x2)", "n[1-2]", **PINNED)
    assert workers(variables) == (["n1:20000", "n2:20000"], 1)


def test_uneven_three_and_two():
    variables = srun_task(4, 1, 1, "3,2", "n[1-2]", **PINNED)
    assert workers(variables) == (["n1:20000", "n1:20001", "n1:20002", "n2:20000",
                                   "n2:20001"], 4)


def test_the_steps_nodes_not_the_jobs():
    variables = srun_task(1, 0, 1, "2", "n2", SLURM_JOB_NODELIST="n[1-2]",
                          SLURM_TASKS_PER_NODE="2(x2)", **PINNED)
    assert workers(variables) == (["n2:20000", "n2:20001"], 1)


def test_a_cyclic_distribution_is_refused():
    """srun --distribution=cyclic puts rank 1 on the second node: the block-ordered
    worker list would give it another task's address."""
    variables = srun_task(1, 1, 0, "2(x2)", "n[1-2]", **PINNED)
    with pytest.raises(UsageError) as err:
        tfc.resolve_tf_config(variables, 12345)
    message = str(err.value)
    assert message.startswith("srun task layout: received rank 1 on node 1 (n2) as its "
                              "local task 0")
    assert "expected block distribution (rank 2 there)" in message
    assert "Fix: srun --distribution=block" in message


def test_pmi2_tasks_are_srun_tasks_for_mwms_too():
    variables = srun_task(3, 1, 1, "2(x2)", "n[1-2]", PMI_RANK="3", PMI_SIZE="4", **PINNED)
    assert workers(variables) == (["n1:20000", "n1:20001", "n2:20000", "n2:20001"], 3)


def test_a_given_tf_config_wins():
    given = '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'
    variables = srun_task(1, 1, 0, "1(x2)", "n[1-2]", TF_CONFIG=given)
    assert workers(variables) == (["a:1", "b:2"], 1)


def test_the_batch_step_is_refused_before_any_tf_config():
    with pytest.raises(UsageError, match="Fix: run it under srun"):
        tfc.resolve_tf_config(batch_step(), 12345)
