"""plan --shard_optimizer_state: the memory (1/N of the optimizer state, plus the shard's
own copy of its parameters), the extra collectives (the allgather after the update is
never hidden, one small allreduce more), and the advice where sharding makes it fit."""
import pytest

from horovod_train.plan.cli import build_parser, request_from_args
from horovod_train.plan.cost import memory, predict
from horovod_train.plan.hardware import GIB
from horovod_train.plan.recommend import evaluate, evaluate_all, fabric_for, job_for, recommend

# GPT-2 XL with Adam on eight 24 GB GPUs: the optimizer state (11.6 GiB) is what overflows.
XL = ["--model", "gpt2-xl", "--batch_size", "1", "--gpu", "l4-24gb", "--gpus_per_node", "8",
      "--optimizer", "adam", "--precision", "mixed_bfloat16", "--gradient_checkpointing"]


def _req(*flags):
    return request_from_args(build_parser().parse_args(list(flags)))


def test_optimizer_memory_is_one_nth_plus_the_shard_copy():
    plain, sharded = _req(*XL), _req(*XL, "--shard_optimizer_state")
    params = plain.model.params
    whole = memory(job_for(plain, 1, 1), plain.gpu, 8)
    cut = memory(job_for(sharded, 1, 1), sharded.gpu, 8)
    assert whole.optimizer == pytest.approx(params * 4 * 2)
    assert cut.optimizer == pytest.approx((params * 4 * 2 + params * 4) / 8)
    assert cut.params == whole.params and cut.gradients == whole.gradients
    one = memory(job_for(sharded, 1, 1), sharded.gpu, 1)  # one GPU shards nothing
    assert one.optimizer == whole.optimizer


def test_same_wire_bytes_but_the_allgather_is_exposed():
    plain, sharded = _req(*XL), _req(*XL, "--shard_optimizer_state")
    a = predict(job_for(plain, 1, 1), plain.gpu, fabric_for(plain, 1))
    b = predict(job_for(sharded, 1, 1), sharded.gpu, fabric_for(sharded, 1))
    assert b.comm.exposed_s > a.comm.exposed_s  # half the ring waits for the update
    assert b.comm.calls > a.comm.calls
    assert b.compute.update_s < a.compute.update_s  # 1/8 of the slots updated
    assert b.single_gpu_step_s == pytest.approx(a.single_gpu_step_s)


def test_sharding_is_recommended_where_it_makes_the_model_fit():
    plain = _req(*XL)
    row = evaluate(plain, 1)
    assert not row.fits
    assert "--shard_optimizer_state fits as is" in row.notes[0]
    assert "a bigger GPU" not in row.notes[0] and "GPU with more memory" not in row.notes[0]
    rec = recommend(plain, evaluate_all(plain))
    assert rec.row.levers == ("--shard_optimizer_state",)   # planned with it (issue 55)
    sharded = _req(*XL, "--shard_optimizer_state")
    rows = evaluate_all(sharded)
    assert rows[0].fits and recommend(sharded, rows).row is rows[0]
    assert rows[0].levers == () and rec.row.prediction == rows[0].prediction


def test_still_a_bigger_gpu_where_sharding_cannot_help():
    req = _req("--model", "gpt:layers=48,hidden=6144,heads=48", "--batch_per_gpu", "1",
               "--gpu", "v100-16gb", "--precision", "mixed_float16")
    note = evaluate(req, 1).notes[0]
    assert "--shard_optimizer_state" not in note and "Even one sample per GPU overflows" in note
    assert memory(job_for(req, 1, 1), req.gpu, 1).total > 16 * GIB
