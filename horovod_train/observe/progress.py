"""The chief's console output: one uniform line per interval, plus a bar with ETA on
an interactive terminal. Pure formatting lives in functions the unit tests call."""
import os
import sys
import time

from absl import logging

BAR_REDRAW_S = 0.2  # a terminal needs no more; each redraw is a write syscall


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


def resolve_mode(mode: str, stream=None, environ=None) -> str:
    """'auto' -> 'bar' only on a TTY outside CI (a bar in a log file is noise)."""
    if mode != "auto":
        return mode
    stream = sys.stderr if stream is None else stream
    environ = os.environ if environ is None else environ
    interactive = hasattr(stream, "isatty") and stream.isatty()
    return "bar" if interactive and not environ.get("CI") else "lines"


class Progress:
    """Logs interval lines; in bar mode also keeps one bar line redrawn in place."""

    def __init__(self, mode: str, total: int, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.bar = resolve_mode(mode, self.stream) == "bar"
        self.total = total
        self._drawn_at = 0.0
        self._rate = None
        self._step_s = None
        self._visible = False

    def step(self, step: int):
        """Per step: a clock read, and a redraw at most every BAR_REDRAW_S."""
        if not self.bar:
            return
        now = time.perf_counter()
        if now - self._drawn_at >= BAR_REDRAW_S or step == self.total:
            self._drawn_at = now
            self._draw(step)

    def line(self, text: str, step: int, samples_per_sec=None, step_s=None):
        self._rate = samples_per_sec or self._rate
        self._step_s = step_s or self._step_s
        self._clear()
        logging.info(text)
        if self.bar:
            self._draw(step)

    def note(self, text: str):
        self._clear()
        logging.info(text)

    def close(self):
        if self._visible:
            self.stream.write("\n")
            self.stream.flush()
            self._visible = False

    def _draw(self, step: int):
        eta = (self.total - step) * self._step_s if self._step_s else None
        self.stream.write("\r\033[K" + format_bar(step, self.total, self._rate, eta))
        self.stream.flush()
        self._visible = True

    def _clear(self):
        if self._visible:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._visible = False
