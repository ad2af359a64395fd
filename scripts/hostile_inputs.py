"""Runs every hostile input and fault of the table for real, and writes docs/hostile_inputs.md.

    python scripts/hostile_inputs.py            # run all, write the table
    python scripts/hostile_inputs.py --check    # also exit 1 if any case differs from its expectation
    python scripts/hostile_inputs.py -k seed    # only cases whose name contains 'seed' (no table written)

Each case is one subprocess (argv, env overrides, files made by a setup function in a fresh
temp dir) with a timeout; a case that hits it is reported as HUNG and its processes killed.
The table shows what happens, so cases still being fixed show their current behaviour.
"""
import argparse
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # a setup that writes records loads TF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "hostile_inputs.md")
GROUPS = ("Bad flags", "Bad data", "Checkpoints", "Launch and environment", "Faults during a run")
MARK = "HOSTILE_INPUTS_CASE"  # in every child's environment: finds the processes a case left
PY = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(PY), "horovodrun")


@dataclasses.dataclass
class Case:
    group: str
    name: str
    argv: list  # may hold {tmp}; shown with placeholders
    expect: int  # the exit code the contract promises (negative: killed by that signal)
    env: dict = dataclasses.field(default_factory=dict)
    setup: object = None  # fn(ctx): makes files in ctx.tmp before the run
    during: object = None  # fn(ctx, run): acts on the running case (signals)
    verify: object = None  # fn(ctx) -> None or what is wrong after the run
    timeout: float = 120.0


@dataclasses.dataclass
class Result:
    case: Case
    command: str  # as shown, with placeholders
    code: object  # int, or "HUNG"
    line: str
    problem: str | None  # why the case is not as expected, or None

    @property
    def ok(self) -> bool:
        return self.problem is None


class Context:
    """One case's temp dir, plus what to undo after it (mounts, background jobs)."""

    def __init__(self, tmp: str, mark: str):
        self.tmp, self.mark = tmp, mark
        self.cleanups = []

    def path(self, *parts) -> str:
        return os.path.join(self.tmp, *parts)

    def env(self, **extra) -> dict:
        return child_env(**{MARK: self.mark, **extra})


def child_env(**extra) -> dict:
    """As the tests' child_env: quiet TF, the repo on the path, no launcher identity."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "HOROVOD_RANK", "HOROVOD_SIZE", "PMI_",
                                "SLURM_")) and k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Running:
    """A started case: its stderr collected on a thread, so `during` can wait for a line."""

    def __init__(self, argv, env, cwd):
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace", start_new_session=True)
        self.err, self.out = [], []
        self._readers = [threading.Thread(target=self._drain, args=(s, into), daemon=True)
                         for s, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream, into):
        for line in stream:
            into.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(re.search(pattern, line) for line in list(self.err)):
                return True
            time.sleep(0.2)
        return False

    def finish(self, timeout: float):
        """The exit code, or "HUNG" (then the whole session is killed)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = "HUNG"
        for reader in self._readers:
            reader.join(timeout=5)
        return code


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment holds this case's mark (what a case left behind)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def kill_marked(mark: str):
    """Ends what a case started (by pid: only processes carrying its mark)."""
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# --- what the table shows -----------------------------------------------------------------

_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
_PID = re.compile(r"\b(pid[ =:]?)\d+")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b")


def placeholders(text: str, tmp: str) -> str:
    """Stable text for the table: temp dir, interpreter (and the tools beside it, such as
    horovodrun), repo, host, pids, times replaced."""
    text = text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>")
    text = text.replace(sys.executable, "python").replace(os.path.dirname(sys.executable) + os.sep, "")
    text = text.replace(ROOT + os.sep, "")
    host = socket.gethostname()
    text = re.sub(rf"\b{re.escape(host)}\b", "<host>", text)
    return _TIME.sub("<time>", _PID.sub(r"\1<pid>", text))


def last_line(err_lines, out_lines, limit: int = 400) -> str:
    """The one line a user reads: stderr's last non-empty line (stdout's if stderr is empty),
    without absl's log prefix, trimmed to `limit` characters."""
    for lines in (err_lines, out_lines):
        kept = [ln.strip() for ln in lines if ln.strip()]
        if kept:
            line = _ABSL_PREFIX.sub("", kept[-1])
            return line if len(line) <= limit else line[:limit - 3] + "..."
    return ""


def cell(text: str) -> str:
    """Markdown table cell: pipes escaped, backticks kept out of code spans."""
    return text.replace("|", "\\|").replace("`", "'")


def shown_command(case: Case, tmp: str) -> str:
    env = " ".join(f"{k}={str(v).format(tmp=tmp)!r}" if re.search(r"[\s\"{}]", str(v))
                   else f"{k}={v}" for k, v in case.env.items())
    argv = " ".join(a if a and not re.search(r"[\s\"'{}]", a) else repr(a)
                    for a in (str(x).format(tmp=tmp) for x in case.argv))
    return placeholders(f"{env} {argv}".strip(), tmp)


def format_code(code) -> str:
    if code == "HUNG":
        return "HUNG"
    return f"{code} (signal {-code})" if isinstance(code, int) and code < 0 else str(code)


def render(results, seconds: float) -> str:
    failing = [r for r in results if not r.ok]
    head = ["# Hostile inputs and faults: what each one does", "",
            "Generated by `python scripts/hostile_inputs.py` (every case run for real on this host; "
            "do not edit by hand). Paths under the case's temp dir are shown as `<tmp>`. "
            "Exit codes: 0 ok, 2 bad input (one line, no traceback), 3 diverged, 75 a peer was lost, "
            "143 stopped by SIGTERM after a checkpoint; a negative code is the signal that ended it.",
            "", f"{len(results)} cases, {len(results) - len(failing)} as expected, "
            f"{len(failing)} not ({seconds:.0f} s).", ""]
    body = []
    for group in GROUPS:
        rows = [r for r in results if r.case.group == group]
        if not rows:
            continue
        body += [f"## {group}", "", "| case | command | exit code | expected | the one line it prints |",
                 "| --- | --- | --- | --- | --- |"]
        for r in rows:
            expected = str(r.case.expect) + ("" if r.ok else f" (**not met**: {cell(r.problem)})")
            body.append(f"| {cell(r.case.name)} | `{cell(r.command)}` | {format_code(r.code)} | "
                        f"{expected} | {cell(r.line)} |")
        body.append("")
    return "\n".join(head + body)


# --- running -------------------------------------------------------------------------------

def run_case(case: Case) -> Result:
    mark = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        ctx = Context(tmp, mark)
        try:
            return _run_in(case, ctx)
        finally:
            kill_marked(mark)
            for undo in reversed(ctx.cleanups):
                undo()


def _run_in(case: Case, ctx: Context) -> Result:
    command = shown_command(case, ctx.tmp)
    try:
        if case.setup:
            case.setup(ctx)
    except Exception as err:  # noqa: BLE001 - a case whose setup fails is reported, not fatal
        return Result(case, command, "SETUP", f"setup failed: {err}", f"setup failed: {err}")
    argv = [str(a).format(tmp=ctx.tmp) for a in case.argv]
    env = ctx.env(**{k: str(v).format(tmp=ctx.tmp) for k, v in case.env.items()})
    run = Running(argv, env, ROOT)
    started = time.monotonic()
    if case.during:
        case.during(ctx, run)
    code = run.finish(max(case.timeout - (time.monotonic() - started), 1.0))
    if code == "HUNG":
        kill_marked(ctx.mark)
        run.finish(10)
    line = placeholders(last_line(run.err, run.out), ctx.tmp)
    problem = _problem(case, ctx, code, run)
    ranks = rank_code(case, code, run.err)
    shown = code if ranks is None else f"{code} (horovodrun; the rank: {format_code(ranks)})"
    return Result(case, command, shown, line, problem)


_RANK_CODE = re.compile(r"Exit code: (-?\d+)")


def rank_code(case: Case, code, err_lines):
    """horovodrun exits 1 whichever way a rank failed, and prints that rank's own code
    ('Exit code: 143'): under it, the contract is checked against the rank's code."""
    if case.argv[:1] != [HOROVODRUN] or code != 1:
        return None
    found = [m.group(1) for line in err_lines for m in [_RANK_CODE.search(line)] if m]
    return int(found[-1]) if found else None


def program_lines(case: Case, err_lines) -> list:
    """The lines our program printed: under horovodrun, only the ranks' ('[1]<stderr>:...');
    horovodrun prints its own RuntimeError traceback whenever a rank fails."""
    if case.argv[:1] != [HOROVODRUN]:
        return list(err_lines)
    return [line for line in err_lines if re.match(r"^\[\d+\]<std(err|out)>:", line)]


def _problem(case: Case, ctx: Context, code, run: Running) -> str | None:
    if code == "HUNG":
        return f"no exit within {case.timeout:.0f} s"
    ranks = rank_code(case, code, run.err)
    if (code if ranks is None else ranks) != case.expect:
        return f"exit {format_code(code)}"
    if case.expect == 2 and any("Traceback" in line for line in program_lines(case, run.err)):
        return "a traceback"
    return case.verify(ctx) if case.verify else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if any case's exit code (or after-check) differs")
    parser.add_argument("-k", default="", help="only cases whose name contains one of these (comma-separated; no table)")
    args = parser.parse_args(argv)
    wanted = [k.strip().lower() for k in args.k.split(",")]
    from hostile_cases import CASES  # beside this script; it builds on the helpers above
    cases = [c for c in CASES if any(k in c.name.lower() for k in wanted)]
    started, results = time.monotonic(), []
    for case in cases:
        result = run_case(case)
        results.append(result)
        status = "ok  " if result.ok else "FAIL"
        print(f"{status} {format_code(result.code):>14} | {case.group} | {case.name} | "
              f"{result.problem or ''} | {result.line[:160]}", flush=True)
    if not args.k:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(render(results, time.monotonic() - started) + "\n")
        print(f"wrote {DOC}")
    failing = [r for r in results if not r.ok]
    print(f"{len(results) - len(failing)}/{len(results)} as expected")
    return 1 if args.check and failing else 0


if __name__ == "__main__":
    sys.exit(main())
