"""The case study in miniature: a byte-level decoder LM on Python's own stdlib sources,
2 Horovod ranks, 4-step gradient accumulation, mixed_bfloat16 (docs/lm_case_study.md).

Sized for about a minute on 2 CPU cores (2-3 under load): 120 optimizer steps of 2 ranks
x 4 micro-batches x 4 sequences x 64 bytes (0.25 MB of training text, 2% of an epoch) at a
learning rate of 0.008 per replica (the example: 0.002), which leaves the context-free
plateau sooner. The two full validation passes (start and end) cost as much as the steps
until issue 64, when evaluation stopped running the model op by op (horovod_train/
evaluation.py): 21 s a pass under load, now 6-11. Seeded: it ends at 2.954 nats here, 0.21
under the tighter bar below.
"""
import re

import numpy as np
import pytest

from ranks import assert_ranks_identical, horovodrun, run_ranks


SEQ_LEN = 64  # pycorpus.DEFAULT_SEQ_LEN: the run finds (or builds) the cached corpus itself
MAX_STEPS = 120
CASE_STUDY = ["--dataset=pycorpus", "--model=decoder_lm_small", "--grad_accum_steps=4",
              "--precision=mixed_bfloat16", "--batch_size=4", "--learning_rate=0.008",
              f"--max_steps={MAX_STEPS}",
              "--log_every=50", "--intra_op_threads=1",
              # The ranks build the corpus themselves when it is missing; a copy that was
              # verified once need not be re-read in full (file sizes are still checked).
              "--noverify_data", "--eval_at_start"]


def _corpus_facts():
    """(validation predictions, unigram cross-entropy) from the corpus files themselves.

    The unigram figure is the validation loss of the best predictor that ignores context
    (train byte frequencies, add-one smoothed): a model below it has learnt from context."""
    from horovod_train.data import pycorpus
    assert pycorpus.DEFAULT_SEQ_LEN == SEQ_LEN
    corpus = pycorpus.read_corpus()
    train = np.frombuffer(corpus.data["train"], np.uint8)
    valid = np.frombuffer(corpus.data["validation"], np.uint8)
    windows = len(pycorpus.window_starts(len(valid), SEQ_LEN))
    targets = valid[1:1 + windows * SEQ_LEN]
    freq = np.bincount(train, minlength=256) + 1.0
    unigram = float(-np.mean(np.log(freq / freq.sum())[targets]))
    return windows * SEQ_LEN, unigram


def _start_loss(history) -> float:
    step, loss = history[0]
    assert step == 0, history  # --eval_at_start: the untrained model, measured in this run
    return loss


def test_decoder_lm_on_stdlib_bytes_learns_with_accumulation_and_bf16(tmp_path):
    pytest.importorskip("horovod.tensorflow")
    predictions, unigram = _corpus_facts()
    summary = run_ranks(horovodrun(2, "gloo", CASE_STUDY), tmp_path, timeout=420)

    assert_ranks_identical(summary, tmp_path, 2)
    assert summary["grad_accum_steps"] == 4 and summary["precision"] == "mixed_bfloat16"
    assert summary["dataset"] == "pycorpus" and summary["steps"] == MAX_STEPS
    assert summary["global_batch"] == 2 * 4 * 4 and summary["skipped_steps"] == 0
    # Every validation window evaluated exactly once across the two ranks.
    counts = re.findall(r"on (\d+) predictions", summary["_stderr"])
    assert counts and {int(c) for c in counts} == {predictions}, counts

    history = summary["eval_loss_history"]
    start, (last_step, end) = _start_loss(history), history[-1]
    assert last_step == MAX_STEPS and end == summary["test_loss"]
    assert end < 0.6 * start, history
    # Below the context-free floor (about 3.35 nats): the model reads its context.
    assert end < unigram - 0.2, (end, unigram)
