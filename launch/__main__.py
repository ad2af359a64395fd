"""`python -m launch`: the only module of the launch layer that starts processes.

Everything before execute() is validation and planning (launch/cli.py, spec.py,
plan.py); if any of it fails, the user sees one line on stderr, exit code 2, and
nothing has been started. Processes are started from argv lists, never via a shell.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

from launch import cli
from launch.errors import LaunchError, launch_error

STOP_GRACE_S = 10.0   # after SIGTERM, how long children get to exit before SIGKILL
POLL_S = 0.2


class _Stop(Exception):
    """Raised by the signal handler so the launcher stops its children before exiting."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _exit_code(returncode: int) -> int:
    # A child killed by signal N reports -N; shells report 128+N, so do we.
    return 128 - returncode if returncode < 0 else returncode


def _stop(children: list[subprocess.Popen]) -> None:
    """SIGTERM every live child we started, then SIGKILL those still alive."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _wait_all(children: list[subprocess.Popen]) -> int:
    """0 when all succeed; on the first failure, stop the rest (they would hang in a
    collective waiting for the dead peer) and return its code."""
    running = list(children)
    while running:
        for child in list(running):
            code = child.poll()
            if code is None:
                continue
            running.remove(child)
            if code != 0:
                _stop(running)
                return _exit_code(code)
        time.sleep(POLL_S)
    return 0


def _check_programs(plan) -> None:
    for process in plan.processes:
        program = process.argv[0]
        if shutil.which(program) is None:
            raise launch_error("launcher", program, "a program on PATH",
                               "pip install horovod (for horovodrun), or --launcher mpirun")


def execute(plan) -> int:
    """Starts every process of `plan` and waits; returns the job's exit code."""
    _check_programs(plan)
    children: list[subprocess.Popen] = []

    def on_signal(signum, _frame):
        raise _Stop(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for process in plan.processes:
            env = {**os.environ, **process.env_dict()}
            children.append(subprocess.Popen(list(process.argv), env=env))
        return _wait_all(children)
    except OSError as err:
        _stop(children)
        raise launch_error("launcher", plan.processes[len(children)].argv[0],
                           f"a program that can be started ({err.strerror})",
                           "check the path and permissions") from None
    except _Stop as stop:
        _stop(children)
        return 128 + stop.signum
    except KeyboardInterrupt:
        _stop(children)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _write(output: cli.Output) -> None:
    if output.path is None:
        sys.stdout.write(output.text)
        return
    try:
        with open(output.path, "w", encoding="utf-8") as handle:
            handle.write(output.text)
    except OSError as err:
        raise launch_error("--output", output.path, f"a writable file path ({err.strerror})",
                           "-o job.sbatch") from None
    print(f"wrote {output.path}", file=sys.stderr)


def main(argv=None) -> int:
    try:
        action = cli.parse(sys.argv[1:] if argv is None else list(argv), os.environ)
        if isinstance(action, cli.Output):
            _write(action)
            return 0
        if action.dry_run:
            sys.stdout.write(cli.format_plan(action.plan, action.as_json))
            return 0
        return execute(action.plan)
    except LaunchError as err:
        # One line whatever the message holds (values are repr()-escaped already).
        print("python -m launch: error: " + str(err).replace("\n", " "), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
