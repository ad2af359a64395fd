"""The runs the figures are made of: our program, the bare Horovod loop, plain Keras
fit and MWMS workers, each started as real processes and reduced to img/sec per rank.

Every function returns {"per_rank": [img/s samples], "ranks": n, ...}: the samples
are per logging interval (and per rank) where the run reports intervals, so
"mean +- 1.96 sd" describes the spread inside a run as Horovod's benchmarks do.
"""
import json
import os
import subprocess
import tempfile

from bench import common

# The M2 model as issue 12 states it: a small CNN on 32x32x3, batch 64 per rank.
MODEL_FLAGS = ["--model=digits_cnn", "--dataset=synthetic", "--synthetic_shape=32,32,3",
               "--synthetic_examples=8192", "--batch_size=64", "--eval_every_epochs=0"]
INTERVAL = 10  # steps per logged interval; the first two intervals are warm-up
# Issue 23's realistic model: ~2-4 s a step per rank on one core, so short intervals.
RESNET_FLAGS = ["--model=resnet18_cifar", "--dataset=synthetic", "--synthetic_shape=32,32,3",
                "--synthetic_examples=2048", "--batch_size=32", "--eval_every_epochs=0"]


def model_name(flags) -> str:
    return next(f.split("=", 1)[1] for f in flags if f.startswith("--model="))


def ours_flags(steps: int, threads: int = 1, extra=(), model=MODEL_FLAGS,
               interval: int = INTERVAL) -> list:
    return model + [f"--max_steps={steps}", f"--log_every={interval}",
                    f"--intra_op_threads={threads}", f"--inter_op_threads={threads}", *extra]


def _from_summary(summary: dict, log: str) -> dict:
    """The figures both of our backends report: wall rate per rank and CPU-s per image
    over the same steady intervals (summary.json), and the chief's logged comm shares."""
    per_rank = summary["samples_per_sec_per_rank"]
    return {"rate": sum(per_rank) / len(per_rank), "cpu": summary.get("cpu_seconds_per_sample"),
            "comm_share": common.interval_shares(log, "comm", skip=1),
            "summary_per_rank": per_rank}


def ours(prefix: list, steps: int, threads: int = 1, extra=(), timeout=900,
         model=MODEL_FLAGS, interval: int = INTERVAL, env: dict | None = None) -> dict:
    """Our program under `prefix` (a launcher argv, or [] for one process); `env`:
    variables to add to its environment."""
    summary, log = common.train(prefix, ours_flags(steps, threads, extra, model, interval),
                                timeout, common.child_env(**(env or {})))
    size = summary["world_size"]
    rates = [r / size for r in common.interval_rates(log)]
    return {"per_rank": rates or summary["samples_per_sec_per_rank"], "ranks": size,
            "from": "log intervals" if rates else "summary",
            "data_share": common.interval_shares(log, "data"),
            "chosen_env": "CPU defaults chosen" in log, **_from_summary(summary, log)}


def solo(n: int, steps: int, threads: int = 1, timeout=900, model=MODEL_FLAGS,
         interval: int = INTERVAL) -> dict:
    """n one-process runs of ours (--backend=local) at the same time, each on a core of
    its own (taskset, as training binds n ranks on this host), none communicating. n=2
    over n=1 is the ceiling of M2's efficiency on this host: what 2 ranks would reach if
    their allreduce were free, the cost of sharing caches, memory bandwidth and the
    kernel with a second busy process."""
    cores = sorted(os.sched_getaffinity(0))[:n]
    flags = ["--backend=local", *ours_flags(steps, threads, (), model, interval)]
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"summary{i}.json") for i in range(n)]
        procs = [subprocess.Popen(["taskset", "-c", str(core), common.PY, "-m", "horovod_train",
                                   *flags, f"--summary_json={out}"], cwd=common.ROOT,
                                  env=common.child_env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
                 for core, out in zip(cores, outs)]
        ended = [(p.args, p.communicate(timeout=timeout)[1], p.returncode) for p in procs]
        failed = [f"exit {rc}: {' '.join(args)}\n{err[-2000:]}" for args, err, rc in ended if rc]
        if failed:
            raise common.BenchError("\n".join(failed))
        summaries = []
        for out in outs:
            with open(out) as f:
                summaries.append(json.load(f))
    rates = [s["samples_per_sec_per_rank"][0] for s in summaries]
    cpus = [s.get("cpu_seconds_per_sample") for s in summaries]
    return {"per_rank": rates, "ranks": n, "rate": sum(rates) / n,
            "cpu": sum(cpus) / n if None not in cpus else None}


def bare(prefix: list, steps: int, threads: int = 1, timeout=900, model: str = "digits_cnn",
         batch_size: int = 64, interval: int = INTERVAL, warmup: int = 2 * INTERVAL) -> dict:
    """The bare Horovod loop (bench/bare_horovod.py) under `prefix`."""
    with tempfile.TemporaryDirectory() as tmp:
        common.run(prefix + [common.PY, os.path.join(common.ROOT, "bench", "bare_horovod.py"),
                             f"--model={model}", f"--batch_size={batch_size}",
                             f"--steps={steps}", f"--interval={interval}", f"--out_dir={tmp}",
                             f"--warmup={warmup}", f"--threads={threads}"], timeout)
        results = []
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name)) as f:
                results.append(json.load(f))
    # Each rank's rate over all its timed steps; CPU of every rank over every image.
    rates = [r["images"] / r["seconds"] for r in results]
    return {"per_rank": [r for res in results for r in res["img_per_sec"]],
            "ranks": len(results), "env": results[0]["env"],
            "rate": sum(rates) / len(rates),
            "cpu": sum(r["cpu_s"] for r in results) / sum(r["images"] for r in results)}


def keras_fit(steps: int, threads: int = 1, timeout=900, env: dict | None = None) -> dict:
    """Plain model.fit; `env`: variables to add to its environment."""
    out = common.run([common.PY, os.path.join(common.ROOT, "bench", "keras_fit.py"),
                      f"--steps={steps}", f"--warmup={2 * INTERVAL}", f"--threads={threads}"],
                     timeout, env=common.child_env(**(env or {})))
    res = common.json_lines(out)[-1]
    return {"per_rank": [res["samples_per_sec"]], "ranks": 1, "jit_compile": res["jit_compile"]}


def mwms(np_: int, flags: list, timeout=900) -> dict:
    """Our program on np_ MWMS workers started by horovodrun: the program derives
    TF_CONFIG itself (localhost, ports from --mwms_port_base)."""
    summary, log = common.train(common.launcher("gloo", np_), [
        "--backend=mwms", f"--mwms_port_base={common.free_port_base(np_)}", *flags], timeout)
    rates = [r / np_ for r in common.interval_rates(log)]
    return {"per_rank": rates or summary["samples_per_sec_per_rank"], "ranks": np_,
            "from": "log intervals" if rates else "summary", **_from_summary(summary, log)}
