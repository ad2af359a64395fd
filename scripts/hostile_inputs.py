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
    """Stable text for the table: temp dir, interpreter, repo, host, pids, times replaced."""
    text = text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>")
    text = text.replace(sys.executable, "python").replace(ROOT + os.sep, "")
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


# --- the cases ----------------------------------------------------------------------------
# Setups run in this process (numpy and lmdb only, no TF); a run they need (a checkpoint to
# resume) is a subprocess like the case itself.

PY = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(PY), "horovodrun")
BASE = [PY, "-m", "horovod_train", "--epochs=1", "--intra_op_threads=1", "--eval_every_epochs=0",
        "--baseline_cache=", "--progress=lines"]
LONG = ["--epochs=1000", "--max_steps=100000"]  # runs until a fault ends it
HVD2 = [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2"]
CK = "--checkpoint_dir={tmp}/ck"


def train(*args, steps: int = 20) -> list:
    return BASE + [f"--max_steps={steps}", *args]


def flag_case(name, *args, expect=2) -> Case:
    return Case("Bad flags", name, train(*args), expect)


def a_file(name):
    def setup(ctx):
        with open(ctx.path(name), "w") as f:
            f.write("not a directory\n")
    return setup


def tmpfs(ctx, name: str, size="64k", read_only=False, full=False) -> str:
    """A real small filesystem at ctx.tmp/name (root only), unmounted after the case."""
    mnt = ctx.path(name)
    os.makedirs(mnt, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", mnt], check=True,
                   capture_output=True)
    ctx.cleanups.append(lambda: subprocess.run(["umount", "-l", mnt], capture_output=True))
    if full:
        with open(os.path.join(mnt, "ballast"), "wb", buffering=0) as f:  # nothing left to flush
            try:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
            except OSError:
                pass
    return mnt


def pre_run(ctx, argv, timeout=180):
    proc = subprocess.run(argv, env=ctx.env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {last_line(proc.stderr.splitlines(), [])}")


def checkpoints(ctx) -> list:
    ck = ctx.path("ck")
    return sorted(d for d in os.listdir(ck) if d.startswith("ckpt-")) if os.path.isdir(ck) else []


def lmdb_data(ctx, name="data", count=200, shape=(8, 8, 1), encoding="png") -> str:
    import numpy as np
    x = (np.arange(count * int(np.prod(shape))) % 251).astype(np.uint8).reshape(count, *shape)
    np.savez(ctx.path(f"{name}.npz"), x=x, y=np.arange(count) % 2)
    out = ctx.path(name)
    pre_run(ctx, [PY, "-m", "horovod_train.data", "convert", f"--input={ctx.path(name + '.npz')}",
                  f"--output_dir={out}", "--format=lmdb", f"--encoding={encoding}",
                  "--no_progress"])
    return out


def truncated_lmdb(ctx):
    out = lmdb_data(ctx, count=2000, shape=(16, 16, 1), encoding="raw")
    mdb = os.path.join(out, "train.lmdb", "data.mdb")
    os.truncate(mdb, os.path.getsize(mdb) // 2)


def garbage_image_lmdb(ctx):
    import lmdb
    from horovod_train.data import writers
    out = lmdb_data(ctx)
    env = lmdb.open(os.path.join(out, "train.lmdb"), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(writers.lmdb_key(5), writers.image_example(b"this is not an image", 1))
    env.close()


def two_checkpoints(ctx, *extra):
    pre_run(ctx, train(CK.format(tmp=ctx.tmp), "--checkpoint_every=5", *extra, steps=10))


def damage_newest(how):
    def setup(ctx):
        two_checkpoints(ctx)
        newest = ctx.path("ck", checkpoints(ctx)[-1])
        if how == "meta_list":
            with open(os.path.join(newest, "meta.json"), "w") as f:
                f.write("[1, 2, 3]\n")
        else:
            state = os.path.join(newest, "state.npz")
            os.truncate(state, os.path.getsize(state) // 2)
    return setup


def garbage_checkpoint_dirs(ctx):
    for step in (900, 800):
        os.makedirs(ctx.path("ck", f"ckpt-{step:09d}"))
        with open(ctx.path("ck", f"ckpt-{step:09d}", "meta.json"), "w") as f:
            f.write("x\n")


def fresh_checkpoints_kept(ctx):
    kept = checkpoints(ctx)
    return None if {"ckpt-000000020", "ckpt-000000030"} <= set(kept) else f"left {kept}"


def another_job_writing(ctx):
    job = Running(train(CK.format(tmp=ctx.tmp), "--checkpoint_every=5", *LONG), ctx.env(), ROOT)
    if not job.wait_for(r"train \| step", 120):
        raise RuntimeError(f"the first job did not start: {last_line(job.err, job.out)}")


def signal_when_training(sig, rank=None, pattern=r"train \| step"):
    """during: once a step line shows, send `sig` to the case (or to one rank of it)."""
    def during(ctx, run):
        if not run.wait_for(pattern, 150):
            return
        if rank is None:
            os.kill(run.proc.pid, sig)
            return
        for pid in marked_pids(ctx.mark):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"HOROVOD_RANK={rank}".encode() in env and b"horovod_train" in cmd:
                os.kill(pid, sig)
    return during


def no_process_left(ctx):
    time.sleep(10)
    left = marked_pids(ctx.mark)
    return f"{len(left)} of its processes still running 10 s later" if left else None


def a_checkpoint_written(ctx):
    return None if checkpoints(ctx) else "no checkpoint written on the way out"


def full_disk(name, full=True):
    return lambda ctx: tmpfs(ctx, name, full=full)


TF_CONFIG_TWICE = ('{{"cluster": {{"worker": ["localhost:23456", "localhost:23456"]}}, '
                   '"task": {{"type": "worker", "index": 0}}}}')

CASES = [
    flag_case("--collective_timeout_s=nan", "--collective_timeout_s=nan"),
    flag_case("--collective_timeout_s=inf", "--collective_timeout_s=inf"),
    flag_case("--collective_timeout_s=0", "--collective_timeout_s=0"),
    flag_case("--seed=-1", "--seed=-1"),
    flag_case("--seed=2**32", "--seed=4294967296"),
    flag_case("--warmup_epochs=nan", "--warmup_epochs=nan"),
    flag_case("--warmup_epochs=inf", "--warmup_epochs=inf"),
    flag_case("--momentum=2 (sgd)", "--optimizer=sgd", "--momentum=2"),
    flag_case("--learning_rate=nan", "--learning_rate=nan"),
    flag_case("--learning_rate=inf", "--learning_rate=inf"),
    flag_case("--fusion_threshold_mb=nan", "--fusion_threshold_mb=nan"),
    flag_case("--cycle_time_ms=inf", "--cycle_time_ms=inf"),
    flag_case("--baseline_samples_per_sec=-1", "--baseline_samples_per_sec=-1"),
    flag_case("--stop_grace_s=nan", "--stop_grace_s=nan"),
    Case("Bad flags", "--run_dir under a regular file", train("--run_dir={tmp}/afile/run"), 2,
         setup=a_file("afile")),
    flag_case("--checkpoint_dir=/dev/null/ck", "--checkpoint_dir=/dev/null/ck"),
    Case("Bad flags", "--checkpoint_dir is a regular file", train("--checkpoint_dir={tmp}/afile"), 2,
         setup=a_file("afile")),
    Case("Bad flags", "--checkpoint_dir on a read-only mount", train("--checkpoint_dir={tmp}/ro/ck"),
         2, setup=lambda ctx: tmpfs(ctx, "ro", read_only=True)),
    flag_case("--summary_json under a regular file", "--summary_json=/etc/hostname/s.json"),
    Case("Bad flags", "--export_weights under a regular file",
         train("--export_weights={tmp}/afile/w.npz"), 2, setup=a_file("afile")),
    Case("Bad flags", "data convert --output_dir=<a file>",
         [PY, "-m", "horovod_train.data", "convert", "--input={tmp}/a.npz",
          "--output_dir={tmp}/afile", "--no_progress"], 2,
         setup=lambda ctx: (a_file("afile")(ctx), __import__("numpy").savez(
             ctx.path("a.npz"), x=__import__("numpy").zeros((40, 4, 4, 1), "uint8"),
             y=__import__("numpy").arange(40) % 2))),

    Case("Bad data", "truncated LMDB: training", train("--dataset=lmdb", "--data_dir={tmp}/data",
                                                       "--noverify_data", steps=2), 2,
         setup=truncated_lmdb),
    Case("Bad data", "truncated LMDB: data verify",
         [PY, "-m", "horovod_train.data", "verify", "--data_dir={tmp}/data"], 2, setup=truncated_lmdb),
    Case("Bad data", "undecodable image: data verify",
         [PY, "-m", "horovod_train.data", "verify", "--data_dir={tmp}/data"], 2,
         setup=garbage_image_lmdb),
    Case("Bad data", "undecodable image: training",
         train("--dataset=lmdb", "--data_dir={tmp}/data", steps=5), 2, setup=garbage_image_lmdb),
    Case("Bad data", "undecodable image: training --skip_corrupt",
         train("--dataset=lmdb", "--data_dir={tmp}/data", "--skip_corrupt", steps=5), 0,
         setup=garbage_image_lmdb),

    Case("Checkpoints", "unreadable ckpt dirs with higher steps, keep 2",
         train(CK, "--checkpoint_every=10", "--keep_checkpoints=2", steps=30), 0,
         setup=garbage_checkpoint_dirs, verify=fresh_checkpoints_kept),
    Case("Checkpoints", "a second job on the same --checkpoint_dir",
         train(CK, "--checkpoint_every=5", steps=30), 2, setup=another_job_writing, timeout=150),
    Case("Checkpoints", "resume with another input shape",
         train("--dataset=synthetic", "--synthetic_shape=8,8,3", CK, steps=10), 2,
         setup=lambda ctx: pre_run(ctx, train("--dataset=synthetic", "--synthetic_shape=8,8,1",
                                              CK.format(tmp=ctx.tmp), "--checkpoint_every=5",
                                              steps=5))),
    Case("Checkpoints", "newest meta.json is a JSON list", train(CK, "--checkpoint_every=5", steps=15),
         0, setup=damage_newest("meta_list")),
    Case("Checkpoints", "newest state.npz truncated", train(CK, "--checkpoint_every=5", steps=15), 0,
         setup=damage_newest("truncate")),
    Case("Checkpoints", "restart after the final checkpoint",
         train(CK, "--checkpoint_every=5", steps=10), 0, setup=two_checkpoints),
    Case("Checkpoints", "resume at another world size (1 -> 2 ranks)",
         HVD2 + train(CK, "--checkpoint_every=5", steps=20), 2, setup=two_checkpoints, timeout=180),

    Case("Launch and environment", "TF_CONFIG lists one address twice", train(), 2,
         env={"TF_CONFIG": TF_CONFIG_TWICE}),
    Case("Launch and environment", "HOROVOD_RANK=abc", train(), 2,
         env={"HOROVOD_RANK": "abc", "HOROVOD_SIZE": "2"}),
    Case("Launch and environment", "OMPI_COMM_WORLD_RANK=-1", train(), 2,
         env={"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "2"}),
    Case("Launch and environment", "launch: --port_base inside the ephemeral range",
         [PY, "-m", "launch", "print", "--backend", "mwms", "-np", "2", "--port_base", "40000",
          "--", "python", "-m", "horovod_train"], 2),
    Case("Launch and environment", "python -m launch run is SIGKILLed mid-run",
         [PY, "-m", "launch", "run", "-np", "2", "-H", "localhost:2", "--",
          PY, "-m", "horovod_train", "--intra_op_threads=1", "--log_every=5", *LONG],
         -signal.SIGKILL, during=signal_when_training(signal.SIGKILL), verify=no_process_left,
         timeout=180),

    Case("Faults during a run", "--run_dir fills mid-run (64 KiB tmpfs)",
         train("--run_dir={tmp}/disk/run", "--log_every=1", steps=200), 2,
         setup=full_disk("disk", full=False)),
    Case("Faults during a run", "--summary_json on a full disk",
         train("--summary_json={tmp}/disk/summary.json", steps=5), 2, setup=full_disk("disk")),
    Case("Faults during a run", "--export_weights on a full disk",
         train("--export_weights={tmp}/disk/w.npz", steps=5), 2, setup=full_disk("disk")),
    Case("Faults during a run", "loss stays non-finite",
         train("--learning_rate=1e38", "--optimizer=sgd", "--max_nonfinite_steps=3", steps=50), 3),
    Case("Faults during a run", "SIGTERM, one process, with --checkpoint_dir",
         train(CK, "--log_every=5", *LONG), 143, during=signal_when_training(signal.SIGTERM),
         verify=a_checkpoint_written),
    Case("Faults during a run", "SIGTERM of rank 1 of 2 (horovodrun), with --checkpoint_dir",
         HVD2 + train(CK, "--log_every=5", *LONG), 143,
         during=signal_when_training(signal.SIGTERM, rank=1), verify=a_checkpoint_written,
         timeout=180),
    Case("Faults during a run", "rank 1 of 2 stalls (SIGSTOP), --collective_timeout_s=10",
         HVD2 + train("--collective_timeout_s=10", "--log_every=5", *LONG), 75,
         during=signal_when_training(signal.SIGSTOP, rank=1), timeout=180),
    Case("Faults during a run", "the chief's --run_dir fills, 2 ranks: job exits 2, not 75",
         HVD2 + train("--run_dir={tmp}/disk/run", "--log_every=1", "--epochs=20", steps=300), 2,
         setup=full_disk("disk", full=False), timeout=180),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if any case's exit code (or after-check) differs")
    parser.add_argument("-k", default="", help="only cases whose name contains one of these (comma-separated; no table)")
    args = parser.parse_args(argv)
    wanted = [k.strip().lower() for k in args.k.split(",")]
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
