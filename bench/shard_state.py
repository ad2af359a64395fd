"""--shard_optimizer_state's cost and memory: M2's 2-rank step time, sharded over
unsharded, and a large model's peak memory each way.

  python bench/shard_state.py [--short] [--out runs/bench/shard_state.json]

For each model (resnet18_cifar on synthetic CIFAR-shaped images; the byte-level
decoder_lm on the Python-stdlib corpus), 2 Horovod ranks under Gloo train the same job
with and without --shard_optimizer_state, alternating (plain, sharded, plain, ...) so
that load from other jobs hits both alike. Step time is the mean of the chief's logged
intervals (the first two, which trace the steps, dropped); ratio = sharded / plain step
time, the issue's target 1.05 or less. Each run also reports its optimizer-state bytes
per rank and its peak RSS. Run it on a quiet host (`uptime`): the ranks share its cores.

The full version also trains decoder_lm_124m (85 M parameters with the byte vocabulary:
650 MiB of Adam state) for 6 steps on 2 ranks each way, and reports each rank's peak
RSS once the model and optimizer are built and over the whole run, beside what the
state alone predicts: the slots' bytes saved less the shard's own copy of its parameters.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

COMMON = ["--optimizer=adam", "--noverify_data", "--eval_every_epochs=0", "--baseline_cache="]
MODELS = {
    "resnet18_cifar": ["--model=resnet18_cifar", "--dataset=synthetic",
                       "--synthetic_shape=32,32,3", "--synthetic_examples=2048",
                       "--batch_size=32"],
    "decoder_lm": ["--model=decoder_lm", "--dataset=pycorpus", "--batch_size=8"],
}
SETTINGS = {True: {"rounds": 1, "steps": 24, "log_every": 4},
            False: {"rounds": 2, "steps": 60, "log_every": 10}}
MEMORY = ["--model=decoder_lm_124m", "--dataset=pycorpus", "--batch_size=2", "--max_steps=6",
          "--log_every=3", "--optimizer=adam", "--noverify_data", "--baseline_cache="]


def _one(model: str, sharded: bool, settings: dict) -> dict:
    flags = COMMON + MODELS[model] + [f"--max_steps={settings['steps']}",
                                      f"--log_every={settings['log_every']}"]
    if sharded:
        flags.append("--shard_optimizer_state")
    summary, log = common.train(common.launcher("gloo", 2), flags, timeout=3600)
    rates = common.interval_rates(log)
    return {"samples_per_sec": statistics.fmean(rates) if rates else float("nan"),
            "intervals": rates,
            "optimizer_state_bytes_per_rank": summary["optimizer_state_bytes_per_rank"],
            "peak_rss_mb_per_rank": summary["peak_rss_mb_per_rank"]}


def measure(short: bool) -> dict:
    settings = SETTINGS[short]
    rows = []
    for model in MODELS:
        runs = {"plain": [], "sharded": []}
        for _ in range(settings["rounds"]):
            for variant in runs:
                runs[variant].append(_one(model, variant == "sharded", settings))
        rate = {v: statistics.fmean(r["samples_per_sec"] for r in runs[v]) for v in runs}
        rows.append({"model": model, "runs": runs,
                     "ratio": common.ratio(rate["plain"], rate["sharded"]),
                     "state_ratio": common.ratio(
                         runs["sharded"][0]["optimizer_state_bytes_per_rank"],
                         runs["plain"][0]["optimizer_state_bytes_per_rank"])})
    return {"models": rows, **settings, "memory": None if short else _memory()}


def _memory() -> dict:
    """Peak RSS per rank of decoder_lm_124m, plain and sharded, and what the state predicts."""
    runs = {}
    for variant, more in (("plain", []), ("sharded", ["--shard_optimizer_state"])):
        summary, _ = common.train(common.launcher("gloo", 2), MEMORY + more, timeout=3600)
        runs[variant] = {k: summary.get(k) for k in (
            "peak_rss_mb_built_per_rank", "peak_rss_mb_per_rank", "optimizer_state_bytes_per_rank",
            "shard_parameter_bytes_per_rank")}
    saved = runs["plain"]["optimizer_state_bytes_per_rank"] \
        - runs["sharded"]["optimizer_state_bytes_per_rank"] \
        - runs["sharded"]["shard_parameter_bytes_per_rank"]
    return {"runs": runs, "predicted_saving_mb": saved / 2 ** 20}


def report(r: dict) -> str:
    rows = []
    for x in r["models"]:
        plain, sharded = x["runs"]["plain"], x["runs"]["sharded"]
        rows.append([x["model"],
                     f"{statistics.fmean(p['samples_per_sec'] for p in plain):.1f}",
                     f"{statistics.fmean(s['samples_per_sec'] for s in sharded):.1f}",
                     f"{x['ratio']:.3f}", f"{x['state_ratio']:.2f}",
                     f"{max(plain[0]['peak_rss_mb_per_rank']):.0f}",
                     f"{max(sharded[0]['peak_rss_mb_per_rank']):.0f}"])
    return ("--shard_optimizer_state on 2 Gloo ranks, Adam, "
            f"{r['rounds']} alternating run(s) of {r['steps']} steps per variant\n"
            + common.table(["model", "plain samples/s", "sharded samples/s",
                            "step time sharded/plain (target <= 1.05)",
                            "optimizer state sharded/plain", "plain peak RSS MB",
                            "sharded peak RSS MB"], rows)
            + _memory_report(r.get("memory")))


def _memory_report(m: dict | None) -> str:
    if not m:
        return ""
    rows = [[variant, ", ".join(f"{x:.0f}" for x in run["peak_rss_mb_built_per_rank"]),
             ", ".join(f"{x:.0f}" for x in run["peak_rss_mb_per_rank"]),
             f"{run['optimizer_state_bytes_per_rank'] / 2 ** 20:.1f}"]
            for variant, run in m["runs"].items()]
    return (f"\ndecoder_lm_124m, 2 Gloo ranks, Adam, 6 steps: the state alone predicts "
            f"{m['predicted_saving_mb']:.0f} MB less per rank\n"
            + common.table(["variant", "peak RSS MB once built (per rank)",
                            "peak RSS MB, whole run (per rank)",
                            "optimizer state MiB per rank"], rows))


if __name__ == "__main__":
    common.main("shard_state", __doc__, measure, report)
