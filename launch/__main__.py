"""`python -m launch`: the only module of the launch layer that starts processes.

Everything before execute() is validation and planning (launch/cli.py, spec.py,
plan.py); if any of it fails, the user sees one line on stderr, exit code 2, and
nothing has been started. Processes are started from argv lists, never via a shell.

Children die with the launcher: each leads its own session (its tree can be signalled
as a group) and gets SIGTERM from the kernel when the launcher dies (PR_SET_PDEATHSIG);
a guard process (launch/guard.py) stops their groups, SIGKILL after a grace, when the
launcher is SIGKILLed and cannot.

Their output passes through, line by line and unchanged, so the job's exit code can be
the trainer's (launch/outcome.py): horovodrun --gloo exits 1 whatever failed, and mpirun
137 for a killed rank, where the trainer's contract says 75.
"""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from launch import cli, outcome, trainer_check, usage
from launch import stacks as launch_stacks
from launch.errors import LaunchError, launch_error

STOP_GRACE_S = 10.0   # after SIGTERM, how long children get to exit before SIGKILL
POLL_S = 0.2
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _Stop(Exception):
    """Raised by the signal handler so the launcher stops its children before exiting."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _exit_code(returncode: int) -> int:
    # A child killed by signal N reports -N; shells report 128+N, so do we.
    return 128 - returncode if returncode < 0 else returncode


def _stop(children: list[subprocess.Popen]) -> None:
    """SIGTERM every live child we started (each stops its own tree in order), then
    SIGKILL the process group of those still alive: their children too."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.wait()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass  # ended meanwhile


def _die_with_me():
    """A preexec_fn that makes the child get SIGTERM when this process dies, however it
    dies (Linux prctl PR_SET_PDEATHSIG); None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: no dlopen between fork and exec
    parent = os.getpid()

    def preexec():
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)  # the launcher died before prctl took effect
    return preexec


class _Guard:
    """launch/guard.py in a session of its own: it outlives a SIGKILLed launcher and
    stops the process groups it was told about (see that module)."""

    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "launch.guard"],
                                         stdin=subprocess.PIPE, text=True,
                                         env={**os.environ, "PYTHONPATH": path},
                                         start_new_session=True, stdout=subprocess.DEVNULL)
        except OSError:
            self.proc = None  # the children's PDEATHSIG still covers them

    def tell(self, line: str) -> None:
        try:
            if self.proc is not None:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
        except OSError:
            self.proc = None  # the guard is gone; nothing to tell

    def release(self) -> None:
        """Every child has ended: the guard exits without touching anything."""
        self.tell("done")
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


class _Relay:
    """Passes the children's stdout and stderr on, line by line and unchanged, and keeps
    the first failing rank a launcher names in them (launch/outcome.py)."""

    # How long the output may still flow once the children have ended: the processes
    # below them hold the pipes until they end too (horovodrun --mpi's mpirun and its
    # ranks stop in order after horovodrun itself is gone: a checkpoint, then exit 143).
    DRAIN_S = 2.0

    def __init__(self):
        self.first: outcome.Failure | None = None
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def attach(self, child: subprocess.Popen) -> None:
        for source, sink in ((child.stdout, sys.stdout), (child.stderr, sys.stderr)):
            thread = threading.Thread(target=self._pass, args=(source, sink), daemon=True)
            thread.start()
            self._threads.append(thread)

    def note(self, failure: outcome.Failure | None) -> None:
        with self._lock:
            if self.first is None and failure is not None:
                self.first = failure

    def _pass(self, source, sink) -> None:
        for line in iter(source.readline, b""):
            try:
                buffer = getattr(sink, "buffer", None)  # None: a text stream put in its place
                buffer.write(line) if buffer else sink.write(line.decode(errors="replace"))
                sink.flush()
            except (OSError, ValueError):
                pass  # our own output is gone: keep reading, or the child blocks on a full pipe
            self.note(outcome.failure_in(line.decode(errors="replace")))
        source.close()

    def drain(self, seconds: float = DRAIN_S) -> None:
        deadline = time.monotonic() + seconds
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _start(process, guard: _Guard, preexec, relay: _Relay) -> subprocess.Popen:
    """One child, leader of its own session and process group (so its whole tree can be
    signalled, and a Ctrl-C reaches the launcher, which stops it in order)."""
    env = {**os.environ, **process.env_dict()}
    child = subprocess.Popen(list(process.argv), env=env, start_new_session=True,
                             preexec_fn=preexec, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    guard.tell(f"group {child.pid}")
    relay.attach(child)
    return child


def _wait_all(children: list[subprocess.Popen], guard: _Guard, relay: _Relay,
              one_rank_each: bool) -> int:
    """0 when all succeed; on the first failure, stop the rest (they would hang in a
    collective waiting for the dead peer) and return the job's code (launch/outcome.py)."""
    running = list(children)
    while running:
        for child in list(running):
            code = child.poll()
            if code is None:
                continue
            running.remove(child)
            guard.tell(f"exited {child.pid}")
            if code != 0:
                if one_rank_each:  # the child is rank `index`: no launcher to name it
                    relay.note(outcome.Failure(children.index(child), _exit_code(code)))
                _stop(running)
                relay.drain(STOP_GRACE_S)  # the launcher's last lines name the failing rank
                return _job_exit(_exit_code(code), relay)
        time.sleep(POLL_S)
    relay.drain()
    return 0


def _job_exit(code: int, relay: _Relay) -> int:
    job_code, line = outcome.job_exit(code, relay.first)
    if line:
        print(f"{cli.PROG}: {line}", file=sys.stderr, flush=True)
    return job_code


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
    guard, preexec, relay = _Guard(), _die_with_me(), _Relay()
    # A local mwms job starts each rank itself; horovodrun, mpirun and srun start them all.
    one_rank_each = len(plan.processes) > 1
    try:
        for process in plan.processes:
            children.append(_start(process, guard, preexec, relay))
        return _wait_all(children, guard, relay, one_rank_each)
    except OSError as err:
        _stop(children)
        raise launch_error("launcher", plan.processes[len(children)].argv[0],
                           f"a program that can be started ({err.strerror})",
                           "check the path and permissions") from None
    except _Stop as stop:
        _stop(children)
        relay.drain(STOP_GRACE_S)
        return 128 + stop.signum
    except KeyboardInterrupt:
        _stop(children)
        relay.drain(STOP_GRACE_S)
        return 130
    finally:
        guard.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_training(command) -> trainer_check.TrainerFacts:
    """The training command parsed and validated by the trainer's own flags, in a
    subprocess (launch/trainer_check.py says why); a command that is not the trainer's
    is not checked."""
    flags = trainer_check.trainer_flags(command)
    if flags is None:
        return trainer_check.TrainerFacts()
    try:
        done = subprocess.run(trainer_check.check_argv(flags), capture_output=True, text=True,
                              timeout=trainer_check.TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=trainer_check.check_env(os.environ))
    except (OSError, subprocess.TimeoutExpired) as err:
        # A timeout's own text holds the argv: its credentials and its length say nothing.
        received = f"no answer within {err.timeout:g} s" \
            if isinstance(err, subprocess.TimeoutExpired) else str(err)
        raise launch_error("the training command's check (horovod_train check)", received,
                           f"an answer within {trainer_check.TIMEOUT_S} s",
                           "run the launcher with the Python that has horovod_train") from None
    return trainer_check.read_answer(done.returncode, done.stdout, done.stderr)


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


def main(argv=None, prog: str = cli.PROG) -> int:
    try:
        action = cli.parse(sys.argv[1:] if argv is None else list(argv), os.environ, prog,
                           check=check_training)
        if isinstance(action, cli.Output):
            _write(action)
            return 0
        if isinstance(action, launch_stacks.StacksRequest):
            sys.stdout.write(launch_stacks.dump_live(action))
            return 0
        if action.dry_run:
            sys.stdout.write(cli.format_plan(action.plan, action.as_json))
            return 0
        return execute(action.plan)
    except LaunchError as err:
        # One line whatever the message holds (values are repr()-escaped already).
        print(usage.error_line(prog, err), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
