"""Shared test helpers (a plain module: tests import it by name, as `from helpers import ...`).

Tests that need TF import it themselves (tier 'tf')."""
import contextlib
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Open MPI's variable for where mpirun and orted keep their session directories (each pytest
# process sets its own: tests/conftest.py).
OMPI_TMPDIR_VAR = "OMPI_MCA_orte_tmpdir_base"


def ompi_session_base() -> str:
    """A fresh directory for OMPI_TMPDIR_VAR: short and under /tmp, since Open MPI puts Unix
    sockets below it (a path past 107 bytes cannot be bound). The caller removes it."""
    return tempfile.mkdtemp(prefix="ompi-")


def child_env(**extra) -> dict:
    """Environment for child processes: quiet TF, repo on the path, root-OK MPI."""
    env = dict(os.environ)
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    # The chief finds the developer's terminal even under a launcher (observe/progress.py);
    # a test's ranks print lines, not bars (test_console_ranks.py unsets it to test the bar).
    env.setdefault("CI", "1")
    # A test never inherits a launcher's identity from the shell that runs pytest.
    for name in list(env):
        if name.startswith(("OMPI_COMM_WORLD", "HOROVOD_RANK", "HOROVOD_SIZE", "PMI_", "SLURM_")) \
                or name == "TF_CONFIG":
            del env[name]
    # Nor make's recursion state (CI runs pytest under `make test`): a `make` a test starts
    # would print "make[1]: Entering directory" where a user's shell prints nothing.
    for name in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
        env.pop(name, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_cli(args, timeout=600, env=None, cwd=None) -> subprocess.CompletedProcess:
    """Runs a command (argv list) and returns it; never hangs past `timeout`."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          env=env or child_env(), cwd=cwd or ROOT, stdin=subprocess.DEVNULL)


def run_setup(*args, timeout: float, **env) -> subprocess.CompletedProcess:
    """scripts/setup.sh with `args` and `env` added to child_env(): how a test gets a build
    setup makes and caches (the GPU venv, a Horovod site). Fails the test with setup's own
    last lines."""
    proc = run_cli(["bash", os.path.join(ROOT, "scripts", "setup.sh"), *args],
                   timeout=timeout, env=child_env(**env))
    assert proc.returncode == 0, (f"setup.sh {' '.join(args)} failed ({proc.returncode}):\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


# A launcher's tag on a rank's line (mpi's [1,0]<stderr>:, gloo's [0]<stderr>:), and absl's
# log prefix, which our console lines no longer carry (horovod_train/console.py).
LAUNCHER_TAG = r"(?:\[\d+(?:,\d+)?\]<std(?:err|out)>:)?"
ABSL_PREFIX = re.compile(LAUNCHER_TAG + r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def image_classes(root, labels=("cat", "dog"), per_class=6, shape=(5, 4, 3)):
    """root/<label>/<i>.png of seeded random pixels, for the converter's image-folder
    input; returns root."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for label in labels:
        os.makedirs(os.path.join(root, label))
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(
                os.path.join(root, label, f"{i}.png"))
    return root


@contextlib.contextmanager
def log_filters_kept():
    """The process's logging filters as they were after the block: a CLI entry run in the
    test's own process (commands.run) installs its filters for good (console.redact_logs),
    and other tests count theirs. Yields absl's handler."""
    import logging
    from absl import logging as absl_logging
    targets = [logging.getLogger("absl"), absl_logging.get_absl_handler(),
               *logging.getLogger().handlers]
    targets += [logging.lastResort] if logging.lastResort is not None else []
    saved = [list(t.filters) for t in targets]
    try:
        yield absl_logging.get_absl_handler()
    finally:
        for target, filters in zip(targets, saved):
            target.filters[:] = filters
