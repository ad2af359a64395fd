"""The environment Slurm 22.05 gives a process, as plain dicts for unit tests (the
variables read from Slurm's src/common/env.c: env_array_for_step and setup_env).

srun sets, in every task of a step: SLURM_STEP_ID, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_PROCID,
SLURM_NODEID and SLURM_LOCALID. SLURM_NTASKS_PER_NODE appears only with
--ntasks-per-node, and SLURM_JOB_NODELIST stays the job's. The batch step (the job
script) has SLURM_JOB_ID, SLURM_NTASKS (with -n), SLURM_PROCID=0 and no step variables:
its step id is SLURM_BATCH_SCRIPT, which setup_env does not print.
"""
from launch.slurm_nodes import expand_nodelist, expand_tasks_per_node


def srun_task(procid, nodeid, localid, tasks_per_node, nodelist, *, job="41", step="0",
              **extra):
    """One task's Slurm variables, as srun --distribution=block sets them."""
    counts = expand_tasks_per_node(tasks_per_node)
    variables = {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NTASKS": str(sum(counts)), "SLURM_NPROCS": str(sum(counts)),
        "SLURM_TASKS_PER_NODE": tasks_per_node, "SLURM_NNODES": str(len(counts)),
        "SLURM_STEP_ID": step, "SLURM_STEPID": step,
        "SLURM_STEP_NUM_TASKS": str(sum(counts)), "SLURM_STEP_NUM_NODES": str(len(counts)),
        "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_PROCID": str(procid), "SLURM_NODEID": str(nodeid),
        "SLURM_LOCALID": str(localid), "SLURM_TASK_PID": "4242",
        "SLURM_NODELIST": nodelist, "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1",
    }
    assert len(expand_nodelist(nodelist)) == len(counts)
    variables.update(extra)
    return variables


def batch_step(ntasks="2", **extra):
    """The job script's own environment (sbatch -n 2 job.sh): no srun step."""
    variables = {"SLURM_JOB_ID": "42", "SLURM_JOBID": "42", "SLURM_JOB_NODELIST": "n1",
                 "SLURM_NODELIST": "n1", "SLURM_TASKS_PER_NODE": ntasks or "1", "SLURM_NNODES": "1",
                 "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                 "SLURM_CPUS_ON_NODE": "2", "SLURM_JOB_NUM_NODES": "1", "SLURM_TASK_PID": "7"}
    if ntasks is not None:
        variables.update(SLURM_NTASKS=ntasks, SLURM_NPROCS=ntasks)
    variables.update(extra)
    return variables
