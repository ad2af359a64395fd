"""What a rank prints on the console: our lines without absl's prefix, and none of
TensorFlow's C++ start-up lines. Stdlib only (a filter process runs this module alone).

TensorFlow 2.21 logs its start-up lines through C++ absl before absl::InitializeLog(),
so TF_CPP_MIN_LOG_LEVEL does not hide them; they go straight to file descriptor 2 while
TF is imported (once per native library it loads, and its CUDA probe). So the import
runs inside startup_filter(): fd 2 goes through a filter process that drops the lines
in STARTUP_NOISE and passes every other line on, a real error included.

TensorFlow's later C++ INFO lines (a TFRecord reader's buffer-size notice) are hidden by
TF_CPP_MIN_LOG_LEVEL=1, set unless the user set it. HOROVOD_TRAIN_VERBOSE=1 turns all of
this off: the start-up and INFO lines are shown, and our lines carry absl's
`I1201 18:04:48.730183 1396... loop.py:183]` prefix again.

`python -m horovod_train.console` is the same filter on stdin -> stderr, for a
launcher's own start-up lines: horovodrun's build check imports TF in horovodrun's own
process, so horovodrun typed by hand still shows those few lines before the ranks start
(`make train` puts horovodrun's stderr through this filter); the ranks' are gone either way.
"""
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys

from launch.redact import redact

VERBOSE_ENV = "HOROVOD_TRAIN_VERBOSE"
TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"  # TensorFlow's C++ log threshold (1: no INFO)
# The NVIDIA kernel driver's own file: present on a host whose GPUs the driver runs.
NVIDIA_DRIVER = "/proc/driver/nvidia/version"
FILTER_EXIT_WAIT_S = 10.0  # the filter drains its pipe in milliseconds; never hang on it


def _tf_cpp(source: str, message: str) -> str:
    """A C++ absl line: `I0000 00:00:1796148557.931275    8438 port.cc:153] message`."""
    return rf"[IWEF]\d{{4}} [\d:.]+ +\d+ {re.escape(source)}:\d+\] {message}"


# TensorFlow's known start-up lines, each (pattern, noise only on a host without the
# NVIDIA driver). Where the driver is loaded, "no CUDA" lines are news, so they show.
STARTUP_NOISE = (
    # absl's notice, once per native library that logs before absl::InitializeLog().
    (r"WARNING: All log messages before absl::InitializeLog\(\) is called are written "
     r"to STDERR", False),
    (_tf_cpp("port.cc", r"oneDNN custom operations are on\. .*"), False),
    (_tf_cpp("cpu_feature_guard.cc", r"This TensorFlow binary is optimized to use available "
             r"CPU instructions in performance-critical operations\."), False),
    (r"To enable the following instructions: .*, in other operations, rebuild TensorFlow "
     r"with the appropriate compiler flags\.", False),  # the line above's second line
    (_tf_cpp("cudart_stub.cc", r"Could not find cuda drivers on your machine, GPU will not "
             r"be used\."), True),
    (_tf_cpp("cuda_platform.cc", r"failed call to cuInit: .*"), True),
)


def verbose(environ=None) -> bool:
    value = (os.environ if environ is None else environ).get(VERBOSE_ENV, "")
    return value.strip().lower() not in ("", "0", "false", "no")


def noise_patterns(driver_loaded: bool | None = None) -> re.Pattern:
    """STARTUP_NOISE as one regex, for this host (`driver_loaded` None: look)."""
    if driver_loaded is None:
        driver_loaded = os.path.exists(NVIDIA_DRIVER)
    chosen = [p for p, without_driver_only in STARTUP_NOISE
              if not (without_driver_only and driver_loaded)]
    return re.compile("|".join(f"(?:{p})" for p in chosen))


def filter_lines(src_fd: int, dst_fd: int, noise: re.Pattern) -> None:
    """Copies src to dst line by line until EOF, leaving out the lines `noise` matches
    in full. Each line is written as soon as it is complete; a last line without a
    newline is written too."""
    pending = b""
    while True:
        chunk = os.read(src_fd, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        kept = [line + b"\n" for line in lines if not _is_noise(line, noise)]
        if kept:
            _write_all(dst_fd, b"".join(kept))
    if pending and not _is_noise(pending, noise):
        _write_all(dst_fd, pending)


def _is_noise(line: bytes, noise: re.Pattern) -> bool:
    return noise.fullmatch(line.decode("utf-8", "replace").rstrip("\r")) is not None


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


@contextlib.contextmanager
def startup_filter(environ=None):
    """Runs the body with fd 2 going through a filter process (`python -m
    horovod_train.console`) that drops STARTUP_NOISE and writes the rest to the real
    stderr as it comes. A process, not a buffer: if the body dies, even in native code,
    the filter reads to the end of the pipe and nothing written is lost."""
    if verbose(environ):
        yield
        return
    # TF's C++ INFO lines once logging is set up (a TFRecord reader's "The default
    # buffer size is 262144, which is overridden ..." at every run): hidden from here
    # on unless the user chose a level. Warnings and errors still show.
    os.environ.setdefault(TF_LOG_LEVEL_ENV, "1")
    proc, saved = _start_filter()
    if proc is None:  # no stderr to guard, or no way to start the filter: show everything
        yield
        return
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes our end of the pipe: the filter sees EOF
        os.close(saved)
        try:
            proc.wait(FILTER_EXIT_WAIT_S)  # its last lines come before ours
        except subprocess.TimeoutExpired:
            pass  # a child of the body still holds the pipe; the filter ends with it


def _start_filter():
    """(filter process, a copy of the real fd 2), or (None, None)."""
    try:
        saved = os.dup(2)
    except OSError:
        return None, None
    read_end, write_end = os.pipe()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (package_parent, os.environ.get("PYTHONPATH")) if p))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "horovod_train.console"], stdin=read_end,
                                stdout=subprocess.DEVNULL, stderr=saved, env=env)
    except OSError:
        os.close(write_end)
        os.close(saved)
        return None, None
    finally:
        os.close(read_end)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    return proc, saved


class LineFormatter(logging.Formatter):
    """`message` for INFO, `warning: message` and `error: message` above it; records
    from another logger than absl's name it (`warning: tensorflow: ...`)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        source = "" if record.name == "absl" else f"{record.name}: "
        if record.levelno >= logging.ERROR:
            return f"error: {source}{text}"
        if record.levelno >= logging.WARNING:
            return f"warning: {source}{text}"
        return f"{source}{text}"


class RedactLogs(logging.Filter):
    """Masks credentials in a record before any formatter sees it (launch/redact.py):
    the message with its arguments, and the text of an exception it carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_logs() -> None:
    """RedactLogs, once each (idempotent), on absl's logger itself (our lines, whatever
    handler prints them: absl's, the root's, or Python's last resort before any is set up,
    as in the data CLI), on absl's handler and the root logger's handlers (TensorFlow's
    and Keras' lines), and on the last-resort handler (any logger without a handler).
    Every CLI entry calls it first (horovod_train/commands.py)."""
    from absl import logging as absl_logging
    targets = [logging.getLogger("absl"), absl_logging.get_absl_handler(),
               *logging.getLogger().handlers, logging.lastResort]
    for target in targets:
        if target is not None and not any(isinstance(f, RedactLogs) for f in target.filters):
            target.addFilter(RedactLogs())


def last_line(text: str) -> None:
    """`text` to stderr, credentials masked, in one write and flushed: a process's error
    or last line. One write, as print() writes the text and its newline apart and two
    ranks leaving at once under mpirun then merge their lines into one."""
    shown = redact(text)
    sys.stderr.write(shown if shown.endswith("\n") else shown + "\n")
    sys.stderr.flush()


def use_plain_lines(environ=None) -> None:
    """Our log lines without absl's prefix (kept under HOROVOD_TRAIN_VERBOSE); credentials
    masked either way."""
    redact_logs()
    if verbose(environ):
        return
    from absl import logging as absl_logging
    absl_logging.get_absl_handler().setFormatter(LineFormatter("%(message)s"))


def number(value, digits: int = 4) -> str:
    """A measured figure for a console line: 4 significant digits, '-' when absent."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def per_second(value) -> str:
    """A rate for a console line: whole units, '-' when absent."""
    return "-" if value is None else f"{value:.0f}"


def changed_options(config) -> str:
    """The options that differ from the config's defaults, `name=value` as the flags
    spell them (the flags are the config's leaf fields); 'defaults' when none does."""
    ours, defaults = _leaves(config.to_dict()), _leaves(type(config)().to_dict())
    pairs = [f"{name}={_flag_value(value)}" for name, value in ours.items()
             if defaults.get(name, object()) != value]
    return " ".join(pairs) or "defaults"


def _leaves(section: dict) -> dict:
    leaves = {}
    for name, value in section.items():
        leaves.update(_leaves(value) if isinstance(value, dict) else {name: value})
    return leaves


def _flag_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    text = str(value)
    return text if text and not re.search(r"\s", text) else repr(text)


def main() -> int:
    # Ctrl-C reaches the whole process group; the filter drains to EOF instead, so the
    # launcher's and the ranks' last words still show.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    noise = re.compile(r"(?!)") if verbose() else noise_patterns()
    try:
        filter_lines(0, 2, noise)
    except BrokenPipeError:
        pass  # nobody reads our stderr any more
    return 0


if __name__ == "__main__":
    sys.exit(main())
