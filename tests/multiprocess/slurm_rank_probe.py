"""`python slurm_rank_probe.py FLAGS...` = `python -m horovod_train FLAGS...`, plus a record.

The training program reports world size and local size once, from the chief, and no rank
reports its own rank. The Slurm tests need what every rank saw, so this wrapper runs the
unchanged program in this very process and writes, to $HT_PROBE_DIR/rank-PID.json:

  detected   horovod_train.env.launch_info(): the package's own reading of the launcher's
             variables (or the error it raised), taken before anything else runs;
  backend    the backend's ProcessInfo after it joined the job (Horovod's hvd.rank() etc.,
             or MWMS's TF_CONFIG position), caught by wrapping loop._setup once the program
             imports it (the program imports TensorFlow only after validating its flags, so
             the wrapper must not import it first);
  env        the Slurm variables the rank got, and the node it ran on.

The record is written before training starts and again once the backend is known, so a
rank that fails or is refused still leaves what it detected.
"""
import dataclasses
import importlib.abc
import importlib.util
import json
import os
import socket
import sys

SLURM_NAMES = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
               "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_ID",
               "SLURM_JOB_NODELIST", "SLURMD_NODENAME", "SLURM_JOB_ID")
RECORD = {"pid": os.getpid(), "hostname": socket.gethostname(),
          "env": {name: os.environ[name] for name in SLURM_NAMES if name in os.environ}}


def _write() -> None:
    path = os.path.join(os.environ["HT_PROBE_DIR"], f"rank-{os.getpid()}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(RECORD, handle)
    os.replace(path + ".tmp", path)  # a reader never sees half a record


def _record_detection() -> None:
    from horovod_train import env
    from horovod_train.errors import UsageError
    try:
        RECORD["detected"] = dataclasses.asdict(env.launch_info())
    except UsageError as err:
        RECORD["detected_error"] = str(err)
    _write()


def _patch_loop(loop) -> None:
    original = loop._setup

    def _setup(config, launch):
        backend, jit = original(config, launch)
        RECORD["backend"] = dict(dataclasses.asdict(backend.info), name=backend.name)
        _write()
        return backend, jit

    loop._setup = _setup


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Wraps loop._setup the moment horovod_train.loop is first imported."""

    def find_spec(self, name, path, target=None):
        if name != "horovod_train.loop":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch_loop(module)

        spec.loader.exec_module = exec_module
        return spec


def main() -> None:
    _record_detection()
    sys.meta_path.insert(0, _PatchOnImport())
    from horovod_train.__main__ import run_main
    run_main()  # exits with the program's own code


if __name__ == "__main__":
    main()
