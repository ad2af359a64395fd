"""Figures for the speed levers (issue 5), printed as a table and written as JSON.

  python bench/levers.py [--out runs/bench/levers.json] [--skip_ranks]

1. step time fp32 vs mixed_bfloat16, one process (a regression guard on CPUs: without
   AMX, bf16 math is emulated and slower);
2. collective ops per optimizer step for k = 1, 2, 4, 8 accumulation steps, 2 real
   ranks under horovodrun (and the global batch, to show k scales the work per step);
3. activation memory with and without gradient checkpointing on a 12-block decoder,
   each in a fresh subprocess: peak RSS during training minus RSS before it.
Every figure comes from a run made by this script; nothing is assumed.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

ROOT, PY = common.ROOT, common.PY


def _train(argv_prefix, flags) -> dict:
    return common.train(argv_prefix, flags, timeout=1800)[0]


def precision_figures() -> dict:
    flags = ["--backend=local", "--model=digits_cnn", "--dataset=synthetic",
             "--synthetic_shape=32,32,3", "--synthetic_examples=4096", "--batch_size=64",
             "--max_steps=40", "--log_every=40", "--eval_every_epochs=0"]
    rates = {p: _train([], flags + [f"--precision={p}"])["samples_per_sec"]
             for p in ("fp32", "mixed_bfloat16")}
    return {"samples_per_sec": rates, "bf16_over_fp32": rates["mixed_bfloat16"] / rates["fp32"]}


def accumulation_figures() -> dict:
    hvd = common.launcher("gloo", 2)
    rows = {}
    for k in (1, 2, 4, 8):
        s = _train(hvd, ["--max_steps=6", "--log_every=3", "--eval_every_epochs=0",
                         f"--grad_accum_steps={k}", "--batch_size=8"])
        rows[k] = {"collective_ops_per_step": s["collective_ops_per_step"],
                   "global_batch": s["global_batch"], "samples_per_sec": s["samples_per_sec"]}
    return rows


_MEMORY_CHILD = r"""
import json, resource, sys
import numpy as np, keras, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(2)
import models
from horovod_train.backends.local import LocalBackend
from horovod_train.step import TrainStep
ckpt = sys.argv[1] == "1"
model = models.get_model("decoder_lm", num_layers=12, num_heads=4, width=256, seq_len=256,
                         vocab_size=256, gradient_checkpointing=ckpt)
backend = LocalBackend(); backend.setup()
opt = keras.optimizers.SGD(0.01); opt.build(model.trainable_variables)
step = TrainStep(model, opt, backend)
x = np.random.default_rng(0).integers(0, 256, (8, 256)).astype(np.int32)
no = (tf.constant(False), tf.constant(0.0))  # no poison, no stop vote
step.fused.get_concrete_function(x, x, *no)  # trace first: graph building is not activations
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(3):
    step.fused(x, x, *no)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_mb": before / 1024, "peak_mb": peak / 1024}))
"""


def memory_figures() -> dict:
    out = {}
    for ckpt in (0, 1):
        row = common.json_lines(common.run([PY, "-c", _MEMORY_CHILD, str(ckpt)], 1800))[-1]
        row["activation_mb"] = row["peak_mb"] - row["before_mb"]
        out["checkpointing" if ckpt else "plain"] = row
    out["activation_saving"] = 1 - out["checkpointing"]["activation_mb"] / out["plain"]["activation_mb"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "bench", "levers.json"))
    parser.add_argument("--skip_ranks", action="store_true", help="skip the 2-rank part")
    args = parser.parse_args()
    results = {"precision": precision_figures()}
    p = results["precision"]
    print(f"step throughput fp32 {p['samples_per_sec']['fp32']:.0f} samples/s, mixed_bfloat16 "
          f"{p['samples_per_sec']['mixed_bfloat16']:.0f} samples/s: bf16/fp32 = {p['bf16_over_fp32']:.2f}",
          flush=True)
    results["memory"] = m = memory_figures()
    print(f"activation memory, 12-block decoder: plain {m['plain']['activation_mb']:.0f} MB, "
          f"checkpointed {m['checkpointing']['activation_mb']:.0f} MB: "
          f"{100 * m['activation_saving']:.0f}% less", flush=True)
    if not args.skip_ranks:
        results["accumulation"] = accumulation_figures()
    for k, row in results.get("accumulation", {}).items():
        print(f"k={k}: {row['collective_ops_per_step']} collective op(s) per step, "
              f"global batch {row['global_batch']}, {row['samples_per_sec']:.0f} samples/s")
    print(f"written: {common.write_json(args.out, results)}")


if __name__ == "__main__":
    main()
