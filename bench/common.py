"""What every benchmark script shares: launching, statistics, tables, JSON.

TF-free on purpose: the orchestrating scripts only start processes and do
arithmetic, so the figures are never skewed by TensorFlow threads in the parent,
and the helpers are unit-tested without TensorFlow (tests/unit/test_bench_*.py).
"""
import argparse
import contextlib
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from launch import ports  # standard library only, like this module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)
OUT_DIR = os.path.join(ROOT, "runs", "bench")
# Launcher identity variables that would make a child think it is already a rank.
_INHERITED = ("OMPI_COMM_WORLD", "HOROVOD_RANK", "HOROVOD_SIZE", "PMI_", "SLURM_")
# Our CPU-sharing defaults: scrubbed from the parent's environment so that the bare
# baseline runs with Horovod's defaults and ours chooses them itself.
SHARING_KNOBS = ("HOROVOD_CYCLE_TIME", "OMPI_MCA_mpi_yield_when_idle")


def cpu_seconds() -> float:
    """User + system CPU seconds this process has spent (all its threads)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class BenchError(RuntimeError):
    """A benchmark child failed; carries its command and the tail of its stderr."""


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_INHERITED) and k != "TF_CONFIG" and k not in SHARING_KNOBS}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, PYTHONUNBUFFERED="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def bind_like_training():
    """In a benchmark rank: our program's CPU binding (horovod_train/cpus.py's rule, the
    GPU check left out: benchmarks run on CPU hosts), before TensorFlow starts threads.
    The CPUs, or None when the rule leaves this rank alone."""
    from horovod_train import cpus, env
    info = env.launch_info()
    chosen, _ = cpus.planned(info.local_rank, info.local_size, gpus=0, environ={})
    if chosen is not None:
        cpus.bind_process(chosen)
    return chosen


def run(cmd, timeout: float, env: dict | None = None) -> str:
    """Runs argv `cmd` to completion (never past `timeout`); returns stdout+stderr."""
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env or child_env(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise BenchError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}") from err
    if proc.returncode != 0:
        raise BenchError(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


# A child's ru_maxrss starts from its parent's peak: at exec, Linux folds the high-water
# mark of the memory it leaves (the parent's, copied by fork or shared by vfork) into it.
# So the command is started by a small Python in between, from that one's fresh memory,
# which reports its child's figure on a last line of its own.
_PEAK_MARK = "run_peak maxrss_kib="
_PEAK_WRAPPER = f"""import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print("\\n{_PEAK_MARK}%d" % usage.ru_maxrss, file=sys.stderr, flush=True)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""
_PEAK = re.compile(rf"\n?{_PEAK_MARK}(\d+)\n")


def run_peak(cmd, timeout: float, env: dict | None = None,
             data_limit: int | None = None) -> dict:
    """Runs argv `cmd` like run(), and returns {"output": stdout+stderr, "seconds",
    "peak_rss_mb"}: the peak resident memory of that command's process alone, whatever
    this process's own peak (see _PEAK_WRAPPER). `data_limit`: an RLIMIT_DATA in bytes
    for it, a cap on its heap and anonymous memory."""
    def limit():
        resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen([PY, "-c", _PEAK_WRAPPER, *cmd], cwd=ROOT, env=env or child_env(),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True,
                                preexec_fn=limit if data_limit else None)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass  # ended below, and reported as a time-out
        finally:  # the command and whatever it started, if still there
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        seconds = time.perf_counter() - started
        out.seek(0)
        text = out.read()
    found = _PEAK.findall(text)
    text = _PEAK.sub("", text)
    if proc.returncode != 0 or not found:
        cause = f"timed out after {timeout:.0f} s" if seconds >= timeout else \
            f"exit {proc.returncode}"
        raise BenchError(f"{cause}: {' '.join(cmd)}\n{text[-3000:]}")
    return {"output": text, "seconds": seconds, "peak_rss_mb": int(found[-1]) / 1024}


_NOISE = re.compile(r"^(\[[\d,]+\]<std(out|err)>:)?([WIE]\d{4} |WARNING: All log messages)")


def quiet(text: str) -> str:
    """A child's output without TensorFlow's C++ log lines (CUDA probes and the like)."""
    return "\n".join(line for line in text.splitlines() if not _NOISE.match(line))


def launcher(controller: str, np_: int) -> list:
    """argv prefix starting np_ local ranks: controller 'gloo', 'mpi' (horovodrun) or
    'mpirun' (Open MPI directly)."""
    if controller == "mpirun":
        return ["mpirun", "-np", str(np_), "--bind-to", "none", "--oversubscribe",
                "-x", "PYTHONPATH", "-x", "PATH"]
    if controller not in ("gloo", "mpi"):
        raise ValueError(f"controller: received {controller!r}; expected gloo, mpi or mpirun")
    return [os.path.join(BIN, "horovodrun"), "-np", str(np_), "-H", f"localhost:{np_}",
            f"--{controller}"]


def train(prefix: list, flags: list, timeout: float = 900, env: dict | None = None) -> tuple:
    """Runs `python -m horovod_train` under `prefix`; returns (summary, log text)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "summary.json")
        log = run(prefix + [PY, "-m", "horovod_train", *flags, f"--summary_json={out}"],
                  timeout, env)
        with open(out) as f:
            return json.load(f), log


def free_port_base(width: int = 2) -> int:
    """A base for `width` workers listening on base + local rank: free ports below the
    ephemeral range, which a peer's outgoing connection can never take (launch/ports.py)."""
    return ports.free_port_base(width)


def json_lines(text: str) -> list:
    """Every JSON object a child printed on a line of its own, launcher prefixes such
    as '[1,0]<stdout>:' allowed: the children's results."""
    out, decoder = [], json.JSONDecoder()
    for line in text.splitlines():
        # mpirun may glue the next rank's tagged line after an object: read them all.
        start = line.find("{")
        while start >= 0:
            try:
                found, end = decoder.raw_decode(line, start)
            except ValueError:
                start = line.find("{", start + 1)
                continue
            out.append(found)
            start = line.find("{", end)
    if not out:
        raise BenchError(f"no JSON result line in the child's output:\n{text[-2000:]}")
    return out


# --- statistics -----------------------------------------------------------------

def mean_ci(values) -> tuple:
    """(mean, 1.96 * sample sd): the spread Horovod's benchmarks print. One value: sd 0."""
    values = [float(v) for v in values]
    if not values:
        return float("nan"), float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), 1.96 * sd


def fmt_ci(values, digits: int = 1) -> str:
    mean, ci = mean_ci(values)
    return f"{mean:.{digits}f} +- {ci:.{digits}f}"


def ratio(num, den) -> float:
    return float(num) / float(den) if den else float("nan")


def busbw(size_bytes: int, seconds: float, ranks: int) -> tuple:
    """(algbw, busbw) in GB/s as nccl-tests defines them for allreduce:
    algbw = size / time; busbw = algbw * 2(n-1)/n, the per-link load of a ring,
    comparable across rank counts."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def size_label(size_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes} B"


def sizes_pow2(lo: int, hi: int, step: int = 4) -> list:
    """lo, lo*step, ... up to and including hi (both powers of two)."""
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= step
    if out[-1] != hi:
        out.append(hi)
    return out


# "... | 268 samples/s (134/rank, efficiency 93%) | data 1% ..." (the parenthesis: 2+ ranks)
_RATE = re.compile(r"train \| step (\d+)/\d+ .*?\| ([\d.]+) samples/s(?: \([^)]*\))? \|(.*)$")


def interval_rates(log: str, skip: int = 2) -> list:
    """samples/s of each logging interval from the chief's `train |` lines, dropping the
    first `skip` (the first traces the fused step, the second the three timed parts)."""
    rates = [float(m.group(2)) for m in map(_RATE.search, log.splitlines()) if m]
    return rates[skip:]


def interval_shares(log: str, name: str, skip: int = 2) -> list:
    """The `name NN%` share of each logged interval (e.g. name='data'), as fractions."""
    pattern = re.compile(rf"\b{re.escape(name)} (\d+)%")
    out = []
    for m in map(_RATE.search, log.splitlines()):
        if m:
            share = pattern.search(m.group(3))
            out.append(float(share.group(1)) / 100 if share else float("nan"))
    return out[skip:]


# --- CPU cost beside wall clock ---------------------------------------------------
# Wall-clock efficiency moves with whatever else runs on the host; CPU-seconds per image
# (user + system of every rank, from the OS) does not. Together they split the n-rank
# time per image into the 1-rank work, extra CPU work and waiting.

def cost_split(wall_eff: float, cpu_eff: float) -> dict:
    """Shares of the n-rank time per image, from wall efficiency E_w (n-rank img/s per
    rank / 1-rank img/s) and CPU efficiency E_c (1-rank CPU-s/img / n-rank CPU-s/img):
      work      = E_w              the 1-rank run's time for the same images
      extra_cpu = E_w / E_c - E_w  the added CPU-seconds, at the 1-rank run's busy share
      waiting   = 1 - E_w / E_c    the rest: idle, blocked, or runnable behind other load
    They sum to 1. E_w below E_c means waiting; E_c below 1 means extra CPU work.
    waiting < 0: the ranks kept more cores busy per image than the 1-rank run did."""
    if not (math.isfinite(wall_eff) and math.isfinite(cpu_eff)) or cpu_eff <= 0:
        return {"work": wall_eff, "extra_cpu": float("nan"), "waiting": float("nan")}
    return {"work": wall_eff, "extra_cpu": wall_eff / cpu_eff - wall_eff,
            "waiting": 1 - wall_eff / cpu_eff}


def efficiency(one: list, many: list) -> dict:
    """Wall and CPU efficiency of paired, interleaved repeats. `one` and `many`: per
    repeat {"rate": img/s per rank, "cpu": CPU-s per image (all ranks)}, repeat i of
    `many` measured right after repeat i of `one`. The figures are ratios of the means
    over repeats; the ranges are the per-repeat ratios' min and max."""
    def figures(num, den):
        per = [ratio(a, b) for a, b in zip(num, den)]
        return ratio(statistics.fmean(num), statistics.fmean(den)), [min(per), max(per)]
    wall, wall_range = figures([r["rate"] for r in many], [r["rate"] for r in one])
    cpu, cpu_range = figures([r["cpu"] for r in one], [r["cpu"] for r in many])
    return {"wall": wall, "wall_range": wall_range, "cpu": cpu, "cpu_range": cpu_range,
            "repeats": len(many), **cost_split(wall, cpu)}


def interpret(eff: dict) -> str:
    """One line saying, from the numbers, where the n-rank run's time went."""
    work, extra, wait = eff["work"], eff["extra_cpu"], eff["waiting"]
    if not all(map(math.isfinite, (work, extra, wait))):
        return "no split: a CPU or wall figure is missing"
    text = (f"{100 * work:.0f}% the 1-rank work, {100 * extra:+.0f}% extra CPU work, "
            f"{100 * wait:+.0f}% waiting")
    if 1 - work < 0.02:
        return f"{text}: no measurable loss"
    if wait < 0:
        return (f"{text}: no waiting; the ranks kept more cores busy per image than 1 rank "
                f"did (a background thread on another core), hiding part of the extra CPU")
    cause = ("extra CPU work (communication's CPU, polling, contention)" if extra > wait
             else "waiting (idle or blocked in communication, or descheduled by other load)")
    return f"{text}: the loss of {100 * (1 - work):.0f}% is mostly {cause}"


def fmt_range(values, scale: float = 1.0, digits: int = 2) -> str:
    """'lo..hi' of values (times scale), '-' when empty or not finite."""
    vals = [scale * float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return "-"
    return f"{min(vals):.{digits}f}..{max(vals):.{digits}f}"


# --- output -----------------------------------------------------------------------

def table(headers, rows) -> str:
    """A plain fixed-width table: first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def write_json(path: str, payload: dict) -> str:
    """Writes aside then renames, so a plot never reads half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.partial"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path


def load_average() -> list:
    """1, 5 and 15 minute load averages: other jobs on these cores skew every figure."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    info = {"cpus": os.cpu_count(), "load_average": load_average(), "python": sys.version.split()[0]}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        keep = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
                "L2 cache", "L3 cache", "Flags")
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in keep:
                value = value.strip()
                if key.strip() == "Flags":  # only the vector extensions that matter for TF
                    value = " ".join(f for f in value.split() if f.startswith(("avx", "amx", "fma")))
                info[key.strip()] = value
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def rate_row(label: str, run: dict) -> list:
    """A table row in the format Horovod's benchmarks print, from a runs.* result."""
    mean, ci = mean_ci(run["per_rank"])
    return [label, run["ranks"], f"{mean:.1f} +- {ci:.1f}", f"{mean * run['ranks']:.1f}"]


RATE_HEADERS = ["run", "ranks", "Img/sec per rank (mean +- 1.96 sd)", "Total img/sec"]


def main(name: str, doc: str, measure, report, argv=None) -> dict:
    """The command line every figure script shares: --short, --out; prints the report,
    writes the JSON (with the machine and its load before and after)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the `make bench` version")
    parser.add_argument("--out", default=os.path.join(OUT_DIR, f"{name}.json"))
    args = parser.parse_args(argv)
    return run_figure(name, measure, report, args.short, args.out)


def run_figure(name: str, measure, report, short: bool, out: str) -> dict:
    load_before, start = load_average(), time.perf_counter()
    result = measure(short)
    result.update(figure=name, short=short, load_before=load_before,
                  load_after=load_average(), seconds=round(time.perf_counter() - start, 1),
                  machine=machine())
    print(report(result), flush=True)
    print(f"({name}: {result['seconds']:.0f} s; load average {load_before} -> "
          f"{result['load_after']}; written {write_json(out, result)})\n", flush=True)
    return result
