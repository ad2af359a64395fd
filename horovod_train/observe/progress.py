"""The chief's console output: one uniform line per interval, plus a bar with ETA on
the user's terminal. Pure formatting lives in functions the unit tests call.

Under a launcher the lines travel through the launcher's pipe (so logs keep them) while
the bar goes straight to the terminal; find_terminal says which terminal that is.
"""
import os
import sys
import threading
import time

from absl import logging

BAR_REDRAW_S = 0.2  # a terminal needs no more; each redraw is a write syscall
# After a line the bar stays hidden this long: a line that travels through a launcher's
# pipe reaches the terminal later than the bar would, and would land inside it.
BAR_HOLD_S = 0.5


def format_eta(seconds) -> str:
    """'1:02:03', '2:03' or '45s'; '?' while unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs}s"


def format_bar(step: int, total: int, samples_per_sec, eta_s, width: int = 30) -> str:
    """`[#######.......]  120/1000  12% | 5230 samples/s | eta 1:05`."""
    frac = min(max(step / total, 0.0), 1.0) if total else 0.0
    filled = int(round(frac * width))
    rate = f"{samples_per_sec:.0f} samples/s" if samples_per_sec else "- samples/s"
    return (f"[{'#' * filled}{'.' * (width - filled)}] {step:>{len(str(total))}}/{total} "
            f"{100 * frac:3.0f}% | {rate} | eta {format_eta(eta_s)}")


def find_terminal(stream=None, tty="/dev/tty", proc="/proc", pid=None):
    """The user's terminal, opened for writing, or None. In order:
    1. stderr itself, when it is a terminal (a run started by hand);
    2. the controlling terminal (ranks of mpirun and horovodrun --mpi keep the
       launcher's, though their stderr is a pipe to it);
    3. the terminal of the nearest ancestor whose stderr is its own controlling
       terminal: horovodrun --gloo starts each rank in a new session, which has no
       controlling terminal, but the launcher above it was started from one. A
       terminal that is nobody's controlling one (a daemon's /dev/console) never counts.
    """
    stream = sys.stderr if stream is None else stream
    if hasattr(stream, "isatty") and stream.isatty():
        return stream
    for path in (tty, _ancestor_terminal(os.getpid() if pid is None else pid, proc)):
        if path:
            try:
                return open(path, "w")
            except OSError:
                continue  # /dev/tty without a controlling terminal: ENXIO
    return None


def _ancestor_terminal(pid: int, proc: str) -> str | None:
    seen = {pid}
    stat = _stat(pid, proc)
    while stat and stat[0] > 1 and stat[0] not in seen:
        pid = stat[0]
        seen.add(pid)
        stat = _stat(pid, proc)
        path = stat and _terminal_on_stderr(pid, stat[1], proc)
        if path:
            return path
    return None


def _stat(pid: int, proc: str) -> tuple[int, int] | None:
    """(parent pid, controlling terminal's device number) from /proc/<pid>/stat."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[4])


def _terminal_on_stderr(pid: int, tty_nr: int, proc: str) -> str | None:
    """The path of pid's fd 2 when that is its controlling terminal."""
    if tty_nr == 0:
        return None
    try:
        path = os.readlink(f"{proc}/{pid}/fd/2")
        rdev = os.stat(path).st_rdev
    except OSError:
        return None
    # The kernel's encoding of tty_nr: minor in bits 0-7 and 20-31, major in 8-19.
    major, minor = (tty_nr >> 8) & 0xFFF, (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)
    return path if (os.major(rdev), os.minor(rdev)) == (major, minor) else None


def bar_terminal(mode: str, stream=None, environ=None, **where):
    """Where the bar goes, or None for lines only. 'auto': the user's terminal, never
    under CI (a bar in a CI log is noise); 'bar': that terminal, else `stream`."""
    environ = os.environ if environ is None else environ
    if mode == "lines" or (mode == "auto" and environ.get("CI")):
        return None
    terminal = find_terminal(stream, **where)
    if terminal is None and mode == "bar":
        return sys.stderr if stream is None else stream
    return terminal


class Progress:
    """Logs interval lines; with a terminal also keeps one bar line redrawn in place.
    Every log line of the process first clears the bar (a logging filter), so no line
    lands inside it."""

    def __init__(self, mode: str, total: int, stream=None, environ=None, **where):
        stream = sys.stderr if stream is None else stream
        self.terminal = bar_terminal(mode, stream, environ, **where)
        self.bar = self.terminal is not None
        self._owns_terminal = self.bar and self.terminal is not stream
        self.total = total
        self._hold_s = 0.0 if self.terminal is stream else BAR_HOLD_S
        self._width = _bar_width(self.terminal)
        self._lock = threading.Lock()
        self._drawn_at = self._held_until = 0.0
        self._rate = self._step_s = None
        self._visible = False
        self._filtering = self.bar
        if self._filtering:
            logging.get_absl_handler().addFilter(self._before_log_line)

    def step(self, step: int):
        """Per step: a clock read, and a redraw at most every BAR_REDRAW_S."""
        if not self.bar:
            return
        now = time.perf_counter()
        if now >= self._held_until and (now - self._drawn_at >= BAR_REDRAW_S
                                        or step == self.total):
            self._draw(step)

    def line(self, text: str, step: int, samples_per_sec=None, step_s=None):
        self._rate = samples_per_sec or self._rate
        self._step_s = step_s or self._step_s
        self._make_room()  # also done by the filter, which a non-absl handler lacks
        logging.info(text)
        if self.bar and not self._hold_s:
            self._draw(step)

    def note(self, text: str):
        self._make_room()
        logging.info(text)

    def close(self):
        """Ends the bar's row (the last bar stays on screen) and lets the terminal go."""
        if self._filtering:
            logging.get_absl_handler().removeFilter(self._before_log_line)
            self._filtering = False
        with self._lock:
            if self._visible:
                self._write("\n")
                self._visible = False
        if self._owns_terminal:
            self.terminal.close()
            self._owns_terminal = False
        self.bar = False

    def _before_log_line(self, record) -> bool:
        """A logging filter that lets every record through, after clearing the bar."""
        self._make_room()
        return True

    def _make_room(self):
        with self._lock:
            if self._visible:
                self._write("\r\033[K")
                self._visible = False
            self._held_until = time.perf_counter() + self._hold_s

    def _draw(self, step: int):
        eta = (self.total - step) * self._step_s if self._step_s else None
        text = format_bar(step, self.total, self._rate, eta)[:self._width]
        with self._lock:
            self._drawn_at = time.perf_counter()
            self._write("\r\033[K" + text)
            self._visible = True

    def _write(self, text: str):
        try:
            self.terminal.write(text)
            self.terminal.flush()
        except OSError:  # the terminal went away (a closed ssh session): lines go on
            self.bar = False


def _bar_width(terminal) -> int:
    """The terminal's width less one: a bar that wraps cannot be redrawn in place."""
    try:
        columns = os.get_terminal_size(terminal.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return max(columns - 1, 20) if columns else 200  # 0: a terminal that never said
