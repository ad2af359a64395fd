"""--profile_steps=FIRST:LAST on the ranks of --profile_ranks: a profile of those steps.

Each profiling rank records its own steps FIRST..LAST into RUN_DIR/profile:
  py-spy (--profiler=py-spy, or auto when py-spy is installed): a sampling profile of the
    whole process's Python frames, every thread (TensorFlow's executors, Horovod's
    background thread), idle ones too (a rank waiting in a collective is where the time
    goes), in speedscope's format, rank<R>.speedscope.json; open it
    at https://www.speedscope.app (drag the file in) or with `speedscope FILE`. py-spy
    attaches to the rank from outside (ptrace); where it cannot (a container without
    CAP_SYS_PTRACE, a kernel's ptrace_scope), the rank says so and uses TensorFlow's:
  tf: TensorFlow's profiler trace of the ops, in rank<R>/ (chief: the directory itself, as
    before), which TensorBoard's profile plugin or xprof opens.
Profiling costs while on, so the window is the user's to choose, after warm-up.
"""
import os
import shutil
import signal
import subprocess
import sys

from absl import logging

from horovod_train.errors import usage_error
from launch.private_files import Refused, own_dir

PROFILERS = ("auto", "py-spy", "tf")
PY_SPY_RATE = 100  # samples a second: py-spy's default, a few percent of one core
# Not --native: unwinding native stacks made a digits step ~30x slower here; native frames
# of a moment are what `python -m launch stacks --native` shows.
ATTACH_CHECK_S = 1.0  # a py-spy that cannot attach exits within this


def parse_window(text: str) -> tuple[int, int] | None:
    """(first, last) of 'FIRST:LAST' (or 'FIRST,LAST'), 1-based inclusive; None if empty."""
    if not text:
        return None
    first, _, last = str(text).replace(",", ":").partition(":")
    if not (first.strip().isdigit() and last.strip().isdigit()) or \
            not 1 <= int(first) <= int(last):
        raise usage_error("--profile_steps", text,
                          "FIRST:LAST with 1 <= FIRST <= LAST, e.g. 20:25",
                          "pass --profile_steps=20:25 (a few steps after warm-up)")
    return int(first), int(last)


def parse_ranks(text: str) -> tuple[int, ...]:
    """The ranks of '0,1' ('' = none)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise usage_error("--profile_ranks", text, "rank numbers separated by commas, e.g. 0,1",
                          "pass --profile_ranks=0 (the chief) or e.g. 0,3")
    return tuple(sorted({int(p) for p in parts}))


def py_spy() -> str | None:
    """py-spy's executable: on the PATH or beside this interpreter (a virtualenv)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)


class TfWindow:
    """TensorFlow's profiler over the window, into `logdir`."""

    def __init__(self, window, logdir: str):
        self.first, self.last = window
        self.logdir = logdir
        self._on = False

    def before_step(self, step: int):
        if step == self.first:
            import tensorflow as tf
            tf.profiler.experimental.start(self.logdir)
            self._on = True

    def after_step(self, step: int):
        if self._on and step >= self.last:
            self.stop()
            logging.info("profile | steps %d-%d traced into %s (TensorBoard's profile plugin "
                         "or xprof opens it)", self.first, self.last, self.logdir)

    def stop(self):
        if self._on:
            import tensorflow as tf
            tf.profiler.experimental.stop()
            self._on = False


class PySpyWindow:
    """py-spy recording this process over the window, into `path` (speedscope JSON); TF's
    profiler (`fallback`, a TfWindow) instead when py-spy cannot attach."""

    def __init__(self, window, path: str, executable: str, fallback: TfWindow, rank: int):
        self.first, self.last = window
        self.path, self.executable, self.fallback, self.rank = path, executable, fallback, rank
        self._proc = None
        self._using_fallback = False

    def before_step(self, step: int):
        if self._using_fallback:
            return self.fallback.before_step(step)
        if step != self.first:
            return None
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._proc = subprocess.Popen(
            [self.executable, "record", "--pid", str(os.getpid()), "--rate", str(PY_SPY_RATE),
             "--format", "speedscope", "--output", self.path, "--threads", "--idle"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        try:
            _, err = self._proc.communicate(timeout=ATTACH_CHECK_S)
        except subprocess.TimeoutExpired:
            return None  # attached and recording
        logging.warning("profile | rank %d: py-spy could not attach (%s); TensorFlow's profiler "
                        "instead", self.rank, (err.strip().splitlines() or ["no reason given"])[-1])
        self._proc, self._using_fallback = None, True
        return self.fallback.before_step(step)

    def after_step(self, step: int):
        if self._using_fallback:
            return self.fallback.after_step(step)
        if self._proc is not None and step >= self.last:
            self.stop()
            logging.info("profile | rank %d steps %d-%d: py-spy profile in %s (open it at "
                         "https://www.speedscope.app, or `speedscope %s`)", self.rank,
                         self.first, self.last, self.path, self.path)
        return None

    def stop(self):
        self.fallback.stop()
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._proc = None


def for_rank(observe_config, rank: int, is_chief: bool):
    """This rank's profile window, or None when it profiles nothing."""
    window = parse_window(observe_config.profile_steps)
    if window is None or rank not in parse_ranks(observe_config.profile_ranks):
        return None
    root = os.path.join(observe_config.run_dir, "profile")
    logdir = root if is_chief else os.path.join(root, f"rank{rank}")
    try:  # TensorFlow and py-spy open their files there by names of their own
        for directory in {root, logdir}:
            own_dir(directory)
    except Refused as err:
        logging.warning("profile | %s; no profile this run", err)
        return None
    tf_window = TfWindow(window, logdir)
    executable = py_spy() if observe_config.profiler != "tf" else None
    if executable is None:
        if observe_config.profiler == "py-spy":
            logging.warning("profile | --profiler=py-spy, but no py-spy is installed (pip "
                            "install py-spy); TensorFlow's profiler instead")
        return tf_window
    return PySpyWindow(window, os.path.join(root, f"rank{rank}.speedscope.json"), executable,
                       tf_window, rank)


class Profiled:
    """An observer whose step hooks also drive this rank's profile window."""

    def __init__(self, observer, window):
        self._observer, self._window = observer, window

    def __getattr__(self, name):
        return getattr(self._observer, name)

    def before_step(self, step: int):
        self._window.before_step(step)
        self._observer.before_step(step)

    def after_step(self, step: int):
        self._observer.after_step(step)
        self._window.after_step(step)

    def close(self, summary: dict):
        self._window.stop()
        self._observer.close(summary)
