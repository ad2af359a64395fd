"""Threads per rank: the one rule (horovod_train/env.py), after --intra_op_threads.

1. TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS when set: TensorFlow's own names,
   which `python -m launch` and the sbatch script export (the program used to override
   them with its own count).
2. SLURM_CPUS_PER_TASK (srun/sbatch --cpus-per-task): the CPUs Slurm gave this task,
   at most the CPUs this process may run on (Slurm 22.05's srun does not take
   --cpus-per-task from the batch script, yet the variable is inherited).
3. cores / ranks on this host, as before.
"""
import re

import pytest

from horovod_train import env
from horovod_train.errors import UsageError


@pytest.mark.parametrize("variables, local_size, cores, expected", [
    ({}, 2, 8, 4),
    ({}, 3, 16, 5),
    ({"SLURM_CPUS_PER_TASK": "3"}, 2, 8, 3),       # not 8 // 2
    ({"SLURM_CPUS_PER_TASK": "3"}, 2, 3, 3),       # bound to its own 3 CPUs: not 3 // 2
    ({"SLURM_CPUS_PER_TASK": "6"}, 2, 1, 1),       # inherited, but bound to one CPU
    ({"TF_NUM_INTRAOP_THREADS": "5"}, 2, 8, 5),
    ({"TF_NUM_INTRAOP_THREADS": "5", "SLURM_CPUS_PER_TASK": "3"}, 2, 8, 5),
    ({"TF_NUM_INTRAOP_THREADS": "0"}, 2, 8, 4),    # TF's own reading: 0 = not set
    ({"TF_NUM_INTRAOP_THREADS": ""}, 2, 8, 4),
])
def test_intra_op_threads(variables, local_size, cores, expected):
    assert env.default_intra_op_threads(local_size, cores, variables) == expected


@pytest.mark.parametrize("variables, local_size, expected", [
    ({}, 1, 0), ({}, 2, 2),                         # 0: TF's default
    ({"TF_NUM_INTEROP_THREADS": "1"}, 2, 1),
    ({"TF_NUM_INTEROP_THREADS": "3"}, 1, 3),
])
def test_inter_op_threads(variables, local_size, expected):
    assert env.default_inter_op_threads(local_size, variables) == expected


@pytest.mark.parametrize("name, value", [("TF_NUM_INTRAOP_THREADS", "four"),
                                         ("TF_NUM_INTRAOP_THREADS", "-1"),
                                         ("SLURM_CPUS_PER_TASK", "2.5"),
                                         ("SLURM_CPUS_PER_TASK", "0")])
def test_a_malformed_thread_count_is_one_usage_line(name, value):
    with pytest.raises(UsageError) as err:
        env.default_intra_op_threads(2, 8, {name: value})
    message = str(err.value)
    assert message.startswith(f"environment variable {name}: received {value!r}; expected")
    assert "Fix: " in message and "\n" not in message


def test_the_sbatch_scripts_thread_exports_are_what_each_task_uses():
    """The script exports the threads it computed; srun sets SLURM_CPUS_PER_TASK; the
    worker's rule gives the same count from either, so nothing the script sets is lost."""
    from launch.sbatch import SlurmJob, render_sbatch
    text = render_sbatch(SlurmJob(backend="horovod", command=("python", "-m", "horovod_train"),
                                  nodes=2, tasks_per_node=4, cpus_per_task=6))
    exported = dict(re.findall(r"^export ([A-Z_]+)=(\S+)", text, re.M))
    task = {"SLURM_CPUS_PER_TASK": "6"}
    assert env.default_intra_op_threads(4, 6, {**exported, **task}) == 6
    assert env.default_intra_op_threads(4, 6, task) == 6
    assert int(exported["TF_NUM_INTRAOP_THREADS"]) == 6
