"""Resume from step s's checkpoint and end where an uninterrupted run ends (real ranks),
on the same number of ranks and on another (issue 42: 2 -> 1, 2 -> 3, 1 -> 2).

The uninterrupted run also writes its checkpoints; each relaunch gets a directory
holding only its step-20 checkpoint. Nothing in the state depends on where a run would
have stopped (--max_steps does not enter the schedule), so that checkpoint is what a run
stopped at step 20 leaves; a run that stops writes its final checkpoint as
test_stop_and_crash and test_checkpoint_faults show.

The global batch is 96 (16 x accumulation 3 on 2 ranks; 14 steps an epoch of digits), so
1, 2 and 3 ranks can all keep it; step 20 is 6 steps into epoch 2. On another number of
ranks the weights equal the uninterrupted run's to float32 rounding, not bitwise: the
same examples make the same mean gradient, but summed in another order (a ring
allreduce across ranks, a sum over micro-batches in one rank) and, with another
intra-op thread count per rank, TensorFlow's reductions split differently. Measured: 8e-8
at most on weights of size ~0.3; the bound, 1e-5, is far below what one step on other
examples moves them (~1e-3)."""
import json
import shutil

import numpy as np
import pytest

from ranks import TRAIN, assert_ranks_identical, horovodrun, load_weights, run_ranks

pytest.importorskip("horovod.tensorflow")
BATCH, PER_EPOCH, GLOBAL = 16, 14, 96  # 1437 digits // 96 = 14 steps an epoch
# Adam: its moments and step counter must come back too, or the resumed run drifts.
COMMON = ["--deterministic", "--eval_every_epochs=0", "--log_every=10", "--checkpoint_every=10",
          "--max_steps=40", f"--batch_size={BATCH}", "--intra_op_threads=1"]
RESIZED_TOLERANCE = 1e-5


def _from_step_20(tmp_path, whole_ckpt, name: str) -> str:
    ckpt = tmp_path / name / "ckpt"
    shutil.copytree(whole_ckpt / "ckpt-000000020", ckpt / "ckpt-000000020")
    return f"--checkpoint_dir={ckpt}"


def _assert_same_training(summary, run_dir, reference, ranks, accum, written_by):
    """The relaunch (its summary, as run_ranks returns it) resumed at step 20 on `ranks`
    with `accum`, said so, trained each example of epoch 2 once, and ended on the
    uninterrupted run's weights (to float32 rounding)."""
    assert summary["world_size"] == ranks and summary["grad_accum_steps"] == accum
    assert summary["global_batch"] == GLOBAL and summary["steps"] == 40
    resumed, word = summary["resumed"], "rank" if written_by == 1 else "ranks"
    said = f"written by {written_by} {word} on {ranks} rank"
    assert resumed["step"] == 20 and said in resumed["change"], resumed
    assert f"global batch {GLOBAL} kept" in resumed["change"]
    assert f"checkpoint | resumed from step 20 {said}{'s' if ranks != 1 else ''}: accumulation " \
        f"{GLOBAL // (written_by * BATCH)} -> {accum}, global batch {GLOBAL} kept" \
        in summary["_stderr"]
    # Epoch 2: 6 of its 14 steps before the change, the other 8 after it.
    assert resumed["position"] == [1, 6 * GLOBAL]
    assert resumed["position"][1] + 8 * GLOBAL == PER_EPOCH * GLOBAL
    weights = load_weights(run_dir)
    assert len(weights) == len(reference)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference))
    assert worst <= RESIZED_TOLERANCE, f"{run_dir}: {worst} from the uninterrupted run's weights"


def test_resumed_run_equals_uninterrupted_run_on_two_one_and_three_ranks(tmp_path):
    whole_ckpt, ckpt = tmp_path / "whole_ckpt", tmp_path / "ckpt"
    whole = run_ranks(horovodrun(2, "gloo", COMMON + [f"--checkpoint_dir={whole_ckpt}",
                                                      "--keep_checkpoints=4",
                                                      "--grad_accum_steps=3"]),
                      tmp_path / "whole")
    assert whole["steps"] == 40
    assert sorted(p.name for p in whole_ckpt.glob("ckpt-*")) == \
        [f"ckpt-{step:09d}" for step in (10, 20, 30, 40)]
    ckpt.mkdir()
    shutil.copytree(whole_ckpt / "ckpt-000000020", ckpt / "ckpt-000000020")
    resumed = run_ranks(horovodrun(2, "gloo", COMMON + [f"--checkpoint_dir={ckpt}",
                                                        "--grad_accum_steps=3"]),
                        tmp_path / "resumed")
    assert "resumed from step 20" in resumed["_stderr"]
    assert resumed["steps"] == 40
    assert_ranks_identical(resumed, tmp_path / "resumed", 2)
    for a, b in zip(load_weights(tmp_path / "whole"), load_weights(tmp_path / "resumed")):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # The weights moved after the resume: equality is not two copies of step 20.
    with np.load(ckpt / "ckpt-000000020" / "state.npz") as at_20:
        stored = [at_20[name] for name in sorted(at_20.files)]
    resumed_weights = load_weights(tmp_path / "resumed")
    assert not any(a.shape == b.shape and np.allclose(a, b)
                   for a in resumed_weights for b in stored if a.size > 100)

    # The same checkpoint on 1 rank and on 3: the accumulation keeps the global batch.
    reference = load_weights(tmp_path / "whole")
    one = run_ranks(TRAIN + COMMON + [_from_step_20(tmp_path, whole_ckpt, "on-one")],
                    tmp_path / "on-one")
    _assert_same_training(one, tmp_path / "on-one", reference, ranks=1, accum=6, written_by=2)
    three = run_ranks(horovodrun(3, "mpi", COMMON + [_from_step_20(tmp_path, whole_ckpt,
                                                                   "on-three")]),
                      tmp_path / "on-three")
    _assert_same_training(three, tmp_path / "on-three", reference, ranks=3, accum=2,
                          written_by=2)
    with open(tmp_path / "on-three" / "ckpt" / "ckpt-000000040" / "meta.json") as f:
        meta = json.load(f)
    # What the 3-rank run wrote continues the writer's schedule (x2) and its own sizes.
    assert meta["fingerprint"]["world_size"] == 3 and meta["lr_schedule"]["scale"] == 2.0
    assert meta["position"] == {"epoch": 2, "epoch_examples": 12 * GLOBAL}


def test_one_rank_resumes_on_two_as_the_same_training(tmp_path):
    whole_ckpt = tmp_path / "whole_ckpt"
    run_ranks(TRAIN + COMMON + [f"--checkpoint_dir={whole_ckpt}", "--grad_accum_steps=6"],
              tmp_path / "whole")
    two = run_ranks(horovodrun(2, "gloo", COMMON + [_from_step_20(tmp_path, whole_ckpt,
                                                                  "on-two")]),
                    tmp_path / "on-two")
    _assert_same_training(two, tmp_path / "on-two", load_weights(tmp_path / "whole"), ranks=2,
                          accum=3, written_by=1)
