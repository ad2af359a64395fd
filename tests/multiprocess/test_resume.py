"""Stop after step s, resume, and end where an uninterrupted run ends (2 real ranks)."""
import os

import numpy as np
import pytest

from ranks import assert_ranks_identical, horovodrun, load_weights, run_ranks

pytestmark = pytest.mark.slow
pytest.importorskip("horovod.tensorflow")
# Adam: its moments and step counter must come back too, or the resumed run drifts.
COMMON = ["--deterministic", "--eval_every_epochs=0", "--log_every=10", "--checkpoint_every=10"]


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    whole = run_ranks(horovodrun(2, "gloo", COMMON + ["--max_steps=40"]), tmp_path / "whole")
    assert whole["steps"] == 40
    ckpt = tmp_path / "ckpt"
    first = run_ranks(horovodrun(2, "gloo", COMMON + ["--max_steps=20", f"--checkpoint_dir={ckpt}"]),
                      tmp_path / "first")
    assert first["steps"] == 20 and sorted(os.listdir(ckpt)) == ["ckpt-000000010", "ckpt-000000020"]
    resumed = run_ranks(horovodrun(2, "gloo", COMMON + ["--max_steps=40", f"--checkpoint_dir={ckpt}"]),
                        tmp_path / "resumed")
    assert "resumed from step 20" in resumed["_stderr"]
    assert resumed["steps"] == 40
    assert_ranks_identical(resumed, tmp_path / "resumed", 2)
    for a, b in zip(load_weights(tmp_path / "whole"), load_weights(tmp_path / "resumed")):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # The weights moved after the resume: equality is not two copies of step 20.
    assert any(not np.allclose(a, b) for a, b in
               zip(load_weights(tmp_path / "first"), load_weights(tmp_path / "resumed")))
