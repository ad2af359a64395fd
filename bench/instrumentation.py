"""What observing a run costs: the same training with instrumentation on and off.

    python bench/instrumentation.py [--repeats 8] [--max_steps 200]     # one process
    python bench/instrumentation.py --np 2 [--repeats 3]                # horovodrun runs

"on" is what every run does plus --run_dir (the sampled split step once per logging
interval, metrics.jsonl, TensorBoard scalars, NVML where present); "off" is
--noinstrument without --run_dir (every step fused, no files). Runs alternate
(on, off, off, on, ...) so drift on a shared machine hits both alike. With --np 1
(the default) the runs are loop.run calls in this one process, so many short
alternations are cheap; with --np N they are back-to-back horovodrun jobs. A run's
samples/s is its steps over the wall time of its logging intervals after the first
(which holds tracing): the chief's interval clock runs from one log line to the next,
so it includes what happens between steps (logging, writing) as well as the steps.
Prints the medians and overhead = off / on - 1.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from a checkout


def _argv(np_: int, args: list[str]) -> list[str]:
    train = [sys.executable, "-m", "horovod_train", *args]
    if np_ == 1:
        return train + ["--backend=local"]
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return [horovodrun, "-np", str(np_), "-H", f"localhost:{np_}", "--gloo", *train]


def run_once(np_: int, instrument: bool, common: list[str], workdir: str, index: int) -> float:
    run_dir = os.path.join(workdir, f"{'on' if instrument else 'off'}{index}")
    args = common + ([f"--run_dir={run_dir}", "--baseline_cache="] if instrument
                     else ["--noinstrument"])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, CI="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(_argv(np_, args), capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return steady_rate(proc.stderr)


LINE = re.compile(r"train \| step (\d+)/\d+ \| loss \S+ \| (\d+) samples/s")


def steady_rate(log: str) -> float:
    """Samples/s over the intervals after the first, from the chief's lines: total
    samples over total time, i.e. the step-weighted harmonic mean of interval rates."""
    points = [(int(m.group(1)), float(m.group(2))) for m in LINE.finditer(log)]
    steps = inverse = 0.0  # the batch size is the same in every interval and cancels
    for (prev, _), (step, rate) in zip(points, points[1:]):
        steps += step - prev
        inverse += (step - prev) / rate
    if not steps:
        sys.exit("no steady-state log lines: pass a larger --max_steps")
    return steps / inverse


class _Lines:
    """Collects the chief's log lines of in-process runs (absl logs to stderr)."""

    def __init__(self):
        import logging
        self.text = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.text.append(record.getMessage())

    def __enter__(self):
        from absl import logging as absl_logging
        absl_logging.set_verbosity(absl_logging.INFO)  # as under `python -m horovod_train`
        absl_logging.get_absl_logger().addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        from absl import logging as absl_logging
        absl_logging.get_absl_logger().removeHandler(self.handler)


def run_in_process(instrument: bool, args, workdir: str, index: int) -> float:
    from horovod_train import config as cfg
    from horovod_train import loop
    run_dir = os.path.join(workdir, f"on{index}") if instrument else None
    config = cfg.RunConfig(
        train=cfg.TrainConfig(max_steps=args.max_steps, log_every=args.log_every,
                              eval_every_epochs=0),
        runtime=cfg.RuntimeConfig(backend="local"),
        observe=cfg.ObserveConfig(run_dir=run_dir, instrument=instrument, baseline_cache="",
                                  progress="lines"))
    with _Lines() as lines:
        loop.run(config)
    return steady_rate("\n".join(lines.text))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=1, help="ranks (1 = local backend)")
    parser.add_argument("--repeats", type=int, default=8, help="runs per mode")
    parser.add_argument("--max_steps", type=int, default=200)
    parser.add_argument("--log_every", type=int, default=20)
    args = parser.parse_args(argv)
    common = [f"--max_steps={args.max_steps}", f"--log_every={args.log_every}",
              "--eval_every_epochs=0"]
    rates = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as workdir:
        for i in range(args.repeats):
            for instrument in (True, False) if i % 2 == 0 else (False, True):
                rate = run_in_process(instrument, args, workdir, i) if args.np == 1 else \
                    run_once(args.np, instrument, common, workdir, i)
                rates[instrument].append(rate)
                print(f"run {i + 1} instrumentation {'on ' if instrument else 'off'}: "
                      f"{rate:.0f} samples/s", flush=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median on {on:.0f} samples/s, off {off:.0f} samples/s "
          f"({args.np} rank(s), {args.max_steps} steps, log every {args.log_every})")
    print(f"overhead = off / on - 1 = {100 * (off / on - 1):+.1f}% of step time "
          f"(budget 2%; spread between repeats: on {min(rates[True]):.0f}-{max(rates[True]):.0f}, "
          f"off {min(rates[False]):.0f}-{max(rates[False]):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
