"""The runs the figures are made of: our program, the bare Horovod loop, plain Keras
fit and MWMS workers, each started as real processes and reduced to img/sec per rank.

Every function returns {"per_rank": [img/s samples], "ranks": n, ...}: the samples
are per logging interval (and per rank) where the run reports intervals, so
"mean +- 1.96 sd" describes the spread inside a run as Horovod's benchmarks do.
"""
import json
import os
import tempfile

from bench import common

# The M2 model as issue 12 states it: a small CNN on 32x32x3, batch 64 per rank.
MODEL_FLAGS = ["--model=digits_cnn", "--dataset=synthetic", "--synthetic_shape=32,32,3",
               "--synthetic_examples=8192", "--batch_size=64", "--eval_every_epochs=0"]
INTERVAL = 10  # steps per logged interval; the first two intervals are warm-up


def ours_flags(steps: int, threads: int = 1, extra=()) -> list:
    return MODEL_FLAGS + [f"--max_steps={steps}", f"--log_every={INTERVAL}",
                          f"--intra_op_threads={threads}", f"--inter_op_threads={threads}",
                          *extra]


def ours(prefix: list, steps: int, threads: int = 1, extra=(), timeout=900) -> dict:
    """Our program under `prefix` (a launcher argv, or [] for one process)."""
    summary, log = common.train(prefix, ours_flags(steps, threads, extra), timeout)
    size = summary["world_size"]
    rates = [r / size for r in common.interval_rates(log)]
    return {"per_rank": rates or summary["samples_per_sec_per_rank"], "ranks": size,
            "from": "log intervals" if rates else "summary",
            "data_share": common.interval_shares(log, "data"),
            "summary_per_rank": summary["samples_per_sec_per_rank"],
            "chosen_env": "CPU-sharing defaults chosen" in log}


def bare(prefix: list, steps: int, threads: int = 1, timeout=900) -> dict:
    """The bare Horovod loop (bench/bare_horovod.py) under `prefix`."""
    with tempfile.TemporaryDirectory() as tmp:
        common.run(prefix + [common.PY, os.path.join(common.ROOT, "bench", "bare_horovod.py"),
                             f"--steps={steps}", f"--interval={INTERVAL}", f"--out_dir={tmp}",
                             f"--warmup={2 * INTERVAL}", f"--threads={threads}"], timeout)
        results = []
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name)) as f:
                results.append(json.load(f))
    return {"per_rank": [r for res in results for r in res["img_per_sec"]],
            "ranks": len(results), "env": results[0]["env"]}


def keras_fit(steps: int, threads: int = 1, timeout=900) -> dict:
    out = common.run([common.PY, os.path.join(common.ROOT, "bench", "keras_fit.py"),
                      f"--steps={steps}", f"--warmup={2 * INTERVAL}", f"--threads={threads}"],
                     timeout)
    res = common.json_lines(out)[-1]
    return {"per_rank": [res["samples_per_sec"]], "ranks": 1, "jit_compile": res["jit_compile"]}


def mwms(np_: int, flags: list, timeout=900) -> dict:
    """Our program on np_ MWMS workers started by horovodrun: the program derives
    TF_CONFIG itself (localhost, ports from --mwms_port_base)."""
    summary, log = common.train(common.launcher("gloo", np_), [
        "--backend=mwms", f"--mwms_port_base={common.free_port_base(np_)}", *flags], timeout)
    rates = [r / np_ for r in common.interval_rates(log)]
    return {"per_rank": rates or summary["samples_per_sec_per_rank"], "ranks": np_,
            "from": "log intervals" if rates else "summary",
            "summary_per_rank": summary["samples_per_sec_per_rank"]}
