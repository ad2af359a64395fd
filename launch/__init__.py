"""Login-node launch layer for horovod_train: hostfiles, launcher commands, TF_CONFIG.

Standard library only. It never imports TensorFlow, Horovod or horovod_train, so it
runs on login nodes and `python -m launch --help` is instant.

    hostfile.py      parse / validate / format hostfiles and -H lists
    slurm_nodes.py   Slurm node lists and task counts, without scontrol
    envvars.py       env names, forwarding, CPU-sharing thread defaults
    plan.py          pure argv builders: horovodrun, mpirun, mpiexec (MPICH), srun
    tfconfig.py      TF_CONFIG for MultiWorkerMirroredStrategy workers
    spec.py          a launch request -> LaunchPlan (processes, argv, env additions)
    sbatch.py        sbatch scripts from slurm/*.sh.tmpl
    ports.py         port bases below the ephemeral range; who holds a port
    cli.py           argparse for `python -m launch`
    __main__.py      the one place that starts processes
    procstat.py      a process's start time from /proc (is this pid still that process?)
    guard.py         stops the children's process groups if the launcher is SIGKILLed
    redact.py        credentials out of every shown text (URL userinfo, secret query values)
    private_files.py owner-only files in a directory others may write (RUN/stacks)
"""
from launch.errors import LaunchError
from launch.hostfile import (Host, format_horovodrun_hosts, format_openmpi_hostfile,
                             parse_hostfile, parse_hosts_arg)
from launch.slurm_nodes import expand_nodelist, expand_tasks_per_node
from launch.tfconfig import tf_config, tf_config_for_worker

__all__ = ["LaunchError", "Host", "parse_hostfile", "parse_hosts_arg",
           "format_horovodrun_hosts", "format_openmpi_hostfile", "expand_nodelist",
           "expand_tasks_per_node", "tf_config", "tf_config_for_worker"]
