"""Issue 55 item 7: where a configuration does not fit as planned, the planner searches the
levers its own notes name (accumulation at the same samples per step, --shard_optimizer_state,
--gradient_checkpointing) and recommends the fastest that fits, naming the levers; "none"
only when nothing fits even so, and the reason says what was tried."""
import json

from horovod_train.plan.cli import build_parser, main, request_from_args
from horovod_train.plan.recommend import evaluate, evaluate_all, recommend

# The command: 64 samples per GPU overflow an 80 GB A100 (activations), and the
# notes say --grad_accum_steps 2 (micro-batch 32, same global batch) fits.
GPT2_SMALL = ["--model", "gpt2-small", "--seq_len", "1024", "--global_batch", "512",
              "--gpu", "a100-80gb", "--gpus_per_node", "8", "--horovod_build", "patched"]


def _req(*flags):
    return request_from_args(build_parser().parse_args(list(flags)))


def test_gpt2_small_recommends_the_accumulation_its_note_names():
    req = _req(*GPT2_SMALL)
    rows = evaluate_all(req)
    assert not rows[0].fits and "--grad_accum_steps 2 (micro-batch 32" in rows[0].notes[0]
    rec = recommend(req, rows)
    assert rec.row is not None and rec.row.fits
    assert (rec.row.nodes, rec.row.accum_steps, rec.row.micro_batch, rec.row.global_batch) == (
        1, 2, 32, 512)
    assert rec.row.levers == ("--grad_accum_steps 2",)
    # Cheapest that fits: checkpointing (~1/3 more compute) at the same split is slower.
    ckpt = _req(*GPT2_SMALL, "--gradient_checkpointing")
    slower = evaluate(ckpt, 1, accum=2)
    assert slower.fits and slower.prediction.throughput < rec.row.prediction.throughput


def test_gpt2_small_command_line_says_the_levers_and_exits_0(capsys):
    assert main(GPT2_SMALL) == 0
    out = capsys.readouterr().out
    line = [l for l in out.splitlines() if l.startswith("Recommendation")][0]
    assert "none" not in line
    assert line.startswith("Recommendation: 1 node = 8 GPUs, batch/GPU 32 x 2 accumulation "
                           "steps, global batch 512:")
    assert "(as planned it does not fit, with --grad_accum_steps 2 it does; --objective" in line
    assert main(GPT2_SMALL + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"][0]["fits"] is False          # the table stays what was asked
    assert data["recommendation"]["levers"] == ["--grad_accum_steps 2"]
    assert data["recommendation"]["grad_accum_steps"] == 2


def test_a_per_gpu_batch_keeps_its_samples_per_step():
    """--batch_size 64 (weak scaling): the lever splits it, 32 x 2, and says both flags."""
    req = _req("--model", "gpt2-small", "--seq_len", "1024", "--batch_size", "64",
               "--gpu", "a100-80gb", "--gpus_per_node", "8")
    rec = recommend(req, evaluate_all(req))
    assert (rec.row.micro_batch, rec.row.accum_steps, rec.row.global_batch) == (32, 2, 512)
    assert rec.row.levers == ("--batch_size 32", "--grad_accum_steps 2")


def test_sharding_is_a_lever_where_the_optimizer_state_overflows():
    req = _req("--model", "gpt2-xl", "--batch_size", "1", "--gpu", "l4-24gb",
               "--gpus_per_node", "8", "--optimizer", "adam", "--precision", "mixed_bfloat16",
               "--gradient_checkpointing")
    rec = recommend(req, evaluate_all(req))
    assert rec.row is not None and rec.row.levers == ("--shard_optimizer_state",)
    sharded = _req("--model", "gpt2-xl", "--batch_size", "1", "--gpu", "l4-24gb",
                   "--gpus_per_node", "8", "--optimizer", "adam", "--precision",
                   "mixed_bfloat16", "--gradient_checkpointing", "--shard_optimizer_state")
    as_planned = evaluate(sharded, 1)
    assert rec.row.prediction.throughput == as_planned.prediction.throughput


def test_none_only_when_no_lever_fits_and_the_reason_says_what_was_tried(capsys):
    argv = ["--model", "gpt:layers=48,hidden=6144,heads=48", "--batch_size", "1",
            "--gpu", "v100-16gb", "--precision", "mixed_float16"]
    req = _req(*argv)
    rec = recommend(req, evaluate_all(req))
    assert rec.row is None
    for lever in ("--grad_accum_steps", "--gradient_checkpointing"):
        assert lever in rec.reason
    assert main(argv) == 1
    assert "Recommendation: none; no configuration fits in memory" in capsys.readouterr().out


def test_a_fitting_configuration_needs_no_lever():
    req = _req("--model", "resnet50", "--global_batch", "4096", "--gpu", "a100-40gb",
               "--precision", "tf32", "--interconnect", "ib-hdr", "--nodes", "1,2",
               "--epochs", "90", "--objective", "cheapest")
    misfit, fit = evaluate_all(req)
    assert not misfit.fits and fit.fits and fit.levers == ()
    rec = recommend(req, [misfit, fit])
    # One node fits with accumulation; it is considered beside the two nodes as planned.
    assert rec.row.nodes == 1 and rec.row.levers == ("--grad_accum_steps 2",)
