"""Our progress bars and tables against tqdm, rich and tabulate (issue 45 item 5).

  python scripts/library_check.py [--libs DIR]   (DIR: where tabulate is, if not installed)

Prints, for docs/design.md ("Libraries we measured"): each module's import time in a
fresh interpreter (median of 5), what each bar writes to a log (a pipe, not a terminal)
over 3 s of 20,000 updates a second, and whether tabulate renders the report's table
as ours does. Nothing here is imported by the package.
"""
import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORTS = {
    "ours: horovod_train.observe.progress": "import horovod_train.observe.progress",
    "ours: horovod_train.data.writers (its Progress)": "import horovod_train.data.writers",
    "tqdm": "import tqdm",
    "rich.progress": "import rich.progress",
    "rich.table": "import rich.table",
    "tabulate": "import tabulate",
}
RUN_S, RATE = 3.0, 20000


def import_seconds(statement: str, path: str) -> float | None:
    times = []
    for _ in range(5):
        code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": path}, cwd=ROOT)
        if done.returncode != 0:
            return None
        times.append(float(done.stdout))
    return statistics.median(times)


def _drive(update, total: int) -> None:
    started = time.perf_counter()
    for _ in range(total):
        update()
        # Paced: a real loop does work between updates.
        while time.perf_counter() - started < _ / RATE:
            pass


def log_output() -> dict:
    """What each bar leaves in a log file: (bytes, lines, carriage returns)."""
    from horovod_train.data.writers import Progress
    total, out = int(RUN_S * RATE), {}
    ours = io.StringIO()
    bar = Progress(total, "convert", stream=ours)
    _drive(lambda: bar.update(1), total)
    out["ours (data.writers.Progress)"] = ours.getvalue()
    try:
        import tqdm
        sink = io.StringIO()
        with tqdm.tqdm(total=total, file=sink) as t:
            _drive(lambda: t.update(1), total)
        out["tqdm (defaults)"] = sink.getvalue()
    except ImportError:
        pass
    try:
        from rich.console import Console
        from rich.progress import Progress as RichProgress
        sink = io.StringIO()
        with RichProgress(console=Console(file=sink)) as p:
            task = p.add_task("convert", total=total)
            _drive(lambda: p.advance(task), total)
        out["rich (defaults)"] = sink.getvalue()
    except ImportError:
        pass
    return {k: (len(v), v.count("\n"), v.count("\r")) for k, v in out.items()}


def tables_match() -> str:
    from horovod_train import report
    rows = [{"run": "np2", "ranks": 2, "samples/s": 2919.0, "efficiency %": 47.6,
             "comm %": 15.8, "divergence %": None},
            {"run": "np1", "ranks": 1, "samples/s": 3064.0, "efficiency %": 100.0,
             "comm %": None, "divergence %": 0.0}]
    ours = report.format_table(rows)
    try:
        from tabulate import tabulate
    except ImportError:
        return "tabulate not installed"
    # The same header and cells as ours (split at our column gaps of 2+ spaces).
    lines = [re.split(r"\s{2,}", line.strip()) for line in ours.splitlines()]
    theirs = tabulate(lines[2:], headers=lines[0], tablefmt="simple", stralign="right",
                      disable_numparse=True)
    return "identical" if theirs == ours else f"differs:\n{theirs}\n--- ours:\n{ours}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--libs", help="an extra path where tabulate is installed")
    args = parser.parse_args()
    path = os.pathsep.join(filter(None, [ROOT, args.libs, os.environ.get("PYTHONPATH")]))
    if args.libs:
        sys.path.insert(0, args.libs)
    print("import time, fresh interpreter, median of 5:")
    for name, statement in IMPORTS.items():
        seconds = import_seconds(statement, path)
        print(f"  {name}: " + ("not installed" if seconds is None else f"{seconds * 1e3:.0f} ms"))
    print(f"to a log (not a terminal), {RUN_S:g} s at {RATE} updates/s: bytes, lines, '\\r'")
    for name, (size, lines, returns) in log_output().items():
        print(f"  {name}: {size} bytes, {lines} lines, {returns} carriage returns")
    print("report table via tabulate (simple, right-aligned):", tables_match())


if __name__ == "__main__":
    main()
