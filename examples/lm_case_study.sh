#!/usr/bin/env bash
# The case study in miniature (README: "A language model on Python's own sources"): a byte-level decoder LM trained on Python's
# own standard-library sources, 2 Horovod ranks on this host, 4-step gradient
# accumulation, mixed_bfloat16. Nothing is downloaded: the first run builds the corpus
# (about 12 MB of .py files -> TFRecord shards, 15-30 s) under
# ~/.cache/horovod_train/pycorpus/ and later runs reuse it.
#
#   examples/lm_case_study.sh                 # 600 optimizer steps, about 5 min on 2 cores
#   STEPS=200 examples/lm_case_study.sh --learning_rate=0.004   # what the slow test runs
#   RANKS=4 examples/lm_case_study.sh --precision=fp32     # extra flags pass through
#
# Writes runs/lm_case_study/summary.json and prints the validation-loss figures.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
HOROVODRUN=${HOROVODRUN:-.venv/bin/horovodrun}
RANKS=${RANKS:-2}
HOSTS=${HOSTS:-localhost:${RANKS}}
STEPS=${STEPS:-600}
OUT=${OUT:-runs/lm_case_study}
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if [ "$(id -u)" = 0 ]; then  # OpenMPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Global batch per optimizer step: RANKS x 4 micro-batches x 4 sequences of 64 bytes.
# The default rate (0.002 per replica, x RANKS applied) is the better one for 600 steps;
# the test's 0.004 leaves the unigram plateau (~3.3 nats) sooner but ends higher here.
# --noverify_data: the corpus is written by this machine; file sizes are still checked.
"$HOROVODRUN" -np "$RANKS" -H "$HOSTS" "$PY" -m horovod_train \
  --dataset=pycorpus --model=decoder_lm_small \
  --grad_accum_steps=4 --precision=mixed_bfloat16 --batch_size=4 \
  --max_steps="$STEPS" --log_every=50 --noverify_data --eval_at_start \
  --summary_json="$OUT/summary.json" "$@"

"$PY" - "$OUT/summary.json" <<'PYEOF'
import json, math, sys
s = json.load(open(sys.argv[1]))
evals = ", ".join(f"step {step}: {loss:.3f}" for step, loss in s["eval_loss_history"])
train = ", ".join(f"{step}: {loss:.2f}" for step, loss in s["loss_history"])
print(f"case study | {s['world_size']} ranks | {s['model']} on {s['dataset']} | "
      f"precision {s['precision']} | grad_accum_steps {s['grad_accum_steps']} | "
      f"global batch {s['global_batch']} sequences | {s['steps']} steps | "
      f"{s['wall_seconds']:.0f} s")
print(f"train loss by step | {train}")
print(f"validation loss (nats/byte) | untrained ~ ln 256 = {math.log(256):.3f} | {evals} "
      f"| token accuracy {s['test_accuracy']:.3f}")
print(f"identical weights on all ranks: {len(set(s['weight_digests'])) == 1}")
PYEOF
