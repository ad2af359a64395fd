"""summary.json's shape is a contract (reports, plots and benchmarks read it): a tiny
local run, then its relaunch, write exactly these keys with values of these types."""
import json

import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop, startup  # noqa: E402

# Recorded from a run before the Trainer returned a RunRecord; a change here is a change
# of the summary's contract, not a refactor.
SUMMARY_TYPES = {
    "accuracy_history": list, "backend": str, "collective_ops_in_xla": int,
    "collective_ops_per_step": int, "compression": str, "config": dict,
    "cpu_seconds_per_sample": float, "dataset": str, "divergence_checks": int,
    "epochs": float, "eval_loss_history": list, "final_loss": float,
    "first_step_after_s_per_rank": list, "global_batch": int, "grad_accum_steps": int,
    "jit_compile": bool, "loss_history": list, "loss_scale": float, "model": str,
    "peak_rss_mb_per_rank": list, "precision": str, "samples_per_sec": float,
    "samples_per_sec_per_rank": list, "skipped_steps": int, "startup_s_per_rank": list,
    "steps": int,
    "test_accuracy": float, "test_loss": float, "wall_seconds": float,
    "weight_digests": list, "wire_bytes_per_step": int, "world_size": int,
    "xla_compiled_functions": int,
    # Issue 44: the optimizer state this rank holds (sharded runs add the layout's
    # facts), and the memory once the model and optimizer are built.
    "shard_optimizer_state": bool, "optimizer_state_bytes_per_rank": int,
    "peak_rss_mb_built_per_rank": list,
}


def _types(summary: dict) -> dict:
    return {key: type(value) for key, value in summary.items()}


def test_summary_keys_and_types_of_a_run_and_of_its_relaunch(tmp_path):
    run_dir = tmp_path / "run"
    config = cfg.RunConfig(
        model="digits_mlp", train=cfg.TrainConfig(max_steps=24, log_every=8, eval_every_epochs=0,
                                                  checkpoint_dir=str(tmp_path / "ckpt")),
        runtime=cfg.RuntimeConfig(backend="local"),
        observe=cfg.ObserveConfig(run_dir=str(run_dir), instrument=False))
    keras.backend.clear_session()  # layer names as in a new process, in both runs
    returned = loop.run(config)
    written = json.load(open(run_dir / "summary.json"))
    assert _types(written) == SUMMARY_TYPES
    assert written["steps"] == 24 and written["skipped_steps"] == 0
    assert written["loss_scale"] == 1.0 and written["divergence_checks"] == 0
    assert [s for s, _ in written["loss_history"]] == [8, 16, 24]
    assert [s for s, _ in written["accuracy_history"]] == [24]
    assert written["final_loss"] == written["loss_history"][-1][1]
    assert set(returned) == set(written)
    # The time to the first step by phase: every phase, adding up to the total.
    (phases,) = written["startup_s_per_rank"]
    assert set(phases) == {*startup.KEYS, "total"}
    assert all(v >= 0 for v in phases.values()) and phases["first_step"] > 0
    assert phases["total"] == pytest.approx(sum(phases[k] for k in startup.KEYS), abs=0.01)
    assert phases["total"] == pytest.approx(written["first_step_after_s_per_rank"][0], abs=0.01)

    # A relaunch of the finished run trains nothing: the earlier summary, marked.
    keras.backend.clear_session()
    again = loop.run(config)
    rewritten = json.load(open(run_dir / "summary.json"))
    assert _types(rewritten) == {**SUMMARY_TYPES, "already_complete": bool}
    assert rewritten["already_complete"] is True and again == rewritten
    assert rewritten["loss_history"] == written["loss_history"]
