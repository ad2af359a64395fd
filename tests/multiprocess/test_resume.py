"""Resume from step s's checkpoint and end where an uninterrupted run ends (2 real ranks).

Two launches: the uninterrupted run, which also writes its checkpoints, and a relaunch
from a directory holding only its step-20 checkpoint. Nothing in the state depends on
where a run would have stopped (--max_steps does not enter the schedule), so that
checkpoint is what a run stopped at step 20 leaves; a run that stops writes its final
checkpoint as test_stop_and_crash and test_checkpoint_faults show."""
import shutil

import numpy as np
import pytest

from ranks import assert_ranks_identical, horovodrun, load_weights, run_ranks

pytest.importorskip("horovod.tensorflow")
# Adam: its moments and step counter must come back too, or the resumed run drifts.
COMMON = ["--deterministic", "--eval_every_epochs=0", "--log_every=10", "--checkpoint_every=10",
          "--max_steps=40"]


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    whole_ckpt, ckpt = tmp_path / "whole_ckpt", tmp_path / "ckpt"
    whole = run_ranks(horovodrun(2, "gloo", COMMON + [f"--checkpoint_dir={whole_ckpt}",
                                                      "--keep_checkpoints=4"]),
                      tmp_path / "whole")
    assert whole["steps"] == 40
    assert sorted(p.name for p in whole_ckpt.glob("ckpt-*")) == \
        [f"ckpt-{step:09d}" for step in (10, 20, 30, 40)]
    ckpt.mkdir()
    shutil.copytree(whole_ckpt / "ckpt-000000020", ckpt / "ckpt-000000020")
    resumed = run_ranks(horovodrun(2, "gloo", COMMON + [f"--checkpoint_dir={ckpt}"]),
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
