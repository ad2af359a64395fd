"""Resume from step s's checkpoint and end where an uninterrupted run ends (real ranks),
on the same number of ranks and on another (issue 42: 2 -> 1, 2 -> 3, 1 -> 2).

The uninterrupted run also writes its checkpoints; each relaunch gets a directory
holding only its step-20 checkpoint (the 1 -> 2 relaunch: the 1-process relaunch's
step-30 one). Nothing in the state depends on where a run would have stopped
(--max_steps does not enter the schedule), so that checkpoint is what a run stopped at
step 20 leaves; a run that stops writes its final checkpoint as
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

from ranks import (TRAIN, assert_ranks_identical, horovodrun, load_weights, module_hook,
                   run_ranks)

pytest.importorskip("horovod.tensorflow")
BATCH, PER_EPOCH, GLOBAL = 16, 14, 96  # 1437 digits // 96 = 14 steps an epoch
# Adam: its moments and step counter must come back too, or the resumed run drifts.
COMMON = ["--deterministic", "--eval_every_epochs=0", "--log_every=10", "--checkpoint_every=10",
          "--max_steps=40", f"--batch_size={BATCH}", "--intra_op_threads=1"]
RESIZED_TOLERANCE = 1e-5


def _assert_same_training(summary, run_dir, reference, ranks, accum, written_by, step=20):
    """The relaunch (its summary, as run_ranks returns it) resumed at `step` on `ranks`
    with `accum`, said so, trained each example of the epoch it resumed in once, and ended
    on the uninterrupted run's weights (to float32 rounding)."""
    assert summary["world_size"] == ranks and summary["grad_accum_steps"] == accum
    assert summary["global_batch"] == GLOBAL and summary["steps"] == 40
    resumed, word = summary["resumed"], "rank" if written_by == 1 else "ranks"
    said = f"written by {written_by} {word} on {ranks} rank"
    assert resumed["step"] == step and said in resumed["change"], resumed
    assert f"global batch {GLOBAL} kept" in resumed["change"]
    assert f"checkpoint | resumed from step {step} {said}{'s' if ranks != 1 else ''}: " \
        f"accumulation {GLOBAL // (written_by * BATCH)} -> {accum}, global batch {GLOBAL} " \
        f"kept" in summary["_stderr"]
    # Step 20: 6 of epoch 2's 14 steps before the change, the other 8 after it (step 30:
    # 2 of epoch 3's, and 12 after).
    done = step % PER_EPOCH
    assert resumed["position"] == [step // PER_EPOCH, done * GLOBAL]
    assert resumed["position"][1] + (PER_EPOCH - done) * GLOBAL == PER_EPOCH * GLOBAL
    weights = load_weights(run_dir)
    assert len(weights) == len(reference)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference))
    assert worst <= RESIZED_TOLERANCE, f"{run_dir}: {worst} from the uninterrupted run's weights"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The uninterrupted run (2 Gloo ranks, a checkpoint every 10 steps) and relaunches:
    from its step-20 checkpoint on 2 ranks, on 1 process and on 3 (MPI); and from the
    1-process relaunch's step-30 checkpoint on 2 ranks (the launch the 1 -> 2 test needs:
    a checkpoint written by 1 rank, and the uninterrupted run to compare with)."""
    base = tmp_path_factory.mktemp("resume")
    whole_ckpt = base / "whole_ckpt"
    runs = {"whole": run_ranks(horovodrun(2, "gloo", COMMON + [
        f"--checkpoint_dir={whole_ckpt}", "--keep_checkpoints=4", "--grad_accum_steps=3"]),
        base / "whole")}
    relaunches = (("resumed", horovodrun(2, "gloo", ["--grad_accum_steps=3"]), whole_ckpt, 20),
                  ("on-one", TRAIN, whole_ckpt, 20),
                  ("on-three", horovodrun(3, "mpi", []), whole_ckpt, 20),
                  ("one-on-two", horovodrun(2, "gloo", []), base / "on-one" / "ckpt", 30))
    for name, launcher, source, step in relaunches:
        ckpt = base / name / "ckpt"
        shutil.copytree(source / f"ckpt-{step:09d}", ckpt / f"ckpt-{step:09d}")
        runs[name] = run_ranks(launcher + COMMON + [f"--checkpoint_dir={ckpt}"], base / name)
    return base, runs


def test_resumed_run_equals_uninterrupted_run_on_two_one_and_three_ranks(chain):
    base, runs = chain
    whole_ckpt = base / "whole_ckpt"
    assert runs["whole"]["steps"] == 40
    assert sorted(p.name for p in whole_ckpt.glob("ckpt-*")) == \
        [f"ckpt-{step:09d}" for step in (10, 20, 30, 40)]
    resumed = runs["resumed"]
    assert "resumed from step 20" in resumed["_stderr"]
    assert resumed["steps"] == 40
    assert_ranks_identical(resumed, base / "resumed", 2)
    for a, b in zip(load_weights(base / "whole"), load_weights(base / "resumed")):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # The weights moved after the resume: equality is not two copies of step 20.
    with np.load(whole_ckpt / "ckpt-000000020" / "state.npz") as at_20:
        stored = [at_20[name] for name in sorted(at_20.files)]
    resumed_weights = load_weights(base / "resumed")
    assert not any(a.shape == b.shape and np.allclose(a, b)
                   for a in resumed_weights for b in stored if a.size > 100)

    # The same checkpoint on 1 rank and on 3: the accumulation keeps the global batch.
    reference = load_weights(base / "whole")
    _assert_same_training(runs["on-one"], base / "on-one", reference, ranks=1, accum=6,
                          written_by=2)
    _assert_same_training(runs["on-three"], base / "on-three", reference, ranks=3, accum=2,
                          written_by=2)
    with open(base / "on-three" / "ckpt" / "ckpt-000000040" / "meta.json") as f:
        meta = json.load(f)
    # What the 3-rank run wrote continues the writer's schedule (x2) and its own sizes.
    assert meta["fingerprint"]["world_size"] == 3 and meta["lr_schedule"]["scale"] == 2.0
    # Epoch 3 so far, all of it trained by these 3 ranks x 32 (data/layouts.py).
    assert meta["position"] == {"epoch": 2, "epoch_examples": 12 * GLOBAL,
                                "layouts": [[3, 32, 12 * GLOBAL]]}


def test_one_rank_resumes_on_two_as_the_same_training(chain):
    """1 process (16 x 6) wrote step 30's checkpoint (it had itself resumed from the
    2-rank run's step 20); 2 Gloo ranks (16 x 3) resume from it and end on the
    uninterrupted run's weights. Until issue 64 the 1-process writer was a run from step
    0 of its own, compared with itself; the chain's uninterrupted run is the same
    training (the previous test shows the 1-process relaunch is), one launch fewer."""
    base, runs = chain
    _assert_same_training(runs["one-on-two"], base / "one-on-two", load_weights(base / "whole"),
                          ranks=2, accum=3, written_by=1, step=30)


# ---- A record dataset (TFRecord) resumed mid-epoch in other layouts (data/layouts.py) --
# Each example carries its id in its first pixel; every rank logs, per epoch, the ids of
# each batch its pipeline makes (in order: a rank trains its batches in the order they
# are made, so its first k lines of an epoch are what its first k steps trained on).
RECORDS, RECORD_EPOCH = 1000, 10  # global batch 96: 10 steps an epoch, 40 records dropped
LOG_BATCHES = """
import os
import tensorflow as tf
original = module.TFRecordSource.train_dataset
log = os.path.join(os.environ["TRAINED_IDS_DIR"], f"rank{rank}.txt")

def train_dataset(self, shard, batch_size, seed, epoch, threads=0, trained=None):
    def write(x):
        with open(log, "a") as f:
            f.write(f"{epoch} " + " ".join(str(int(v)) for v in x.numpy()[:, 0, 0, 0]) + "\\n")
        return x
    ds = original(self, shard, batch_size, seed, epoch, threads, trained)
    return ds.map(lambda x, y: (tf.ensure_shape(tf.py_function(write, [x], x.dtype), x.shape), y))

module.TFRecordSource.train_dataset = train_dataset
"""


def _id_records(tmp_path) -> str:
    from horovod_train.data import convert
    rng = np.random.default_rng(0)
    x = rng.normal(size=(RECORDS + 100, 8, 8, 1)).astype(np.float32)
    x[:, 0, 0, 0] = np.arange(RECORDS + 100)
    y = rng.integers(0, 10, RECORDS + 100)
    np.savez(tmp_path / "ids.npz", x_train=x[:RECORDS], y_train=y[:RECORDS],
             x_test=x[RECORDS:], y_test=y[RECORDS:])
    out = str(tmp_path / "tfrecord")
    convert.convert(convert.ConvertOptions(str(tmp_path / "ids.npz"), out, "tfrecord",
                                           num_shards=4, progress=False))
    return out


def _trained(log_dir, epoch: int, steps: int | None = None) -> list:
    """Ids of `epoch`'s records the ranks logged in log_dir trained, the first `steps`
    batches of each rank (None: all its batches of that epoch)."""
    ids = []
    for log in sorted(log_dir.glob("rank*.txt")):
        lines = [line.split()[1:] for line in log.read_text().splitlines()
                 if line.split()[0] == str(epoch)]
        ids += [int(i) for line in lines[:steps] for i in line]
    return ids


def test_a_record_dataset_resumed_in_other_layouts_trains_each_record_once_an_epoch(tmp_path):
    """2 ranks (gloo, 16 x 3) stop 4 steps into epoch 2; 1 process (16 x 6) continues it
    and stops 1 step later; 3 ranks (MPI, 16 x 2) finish it. Epoch 2's records, over the
    three launches, are each trained once (the epoch's 960); the checkpoints record the
    epoch's layouts, and each relaunch says what it read."""
    common = ["--dataset=tfrecord", f"--data_dir={_id_records(tmp_path)}", "--model=digits_mlp",
              *COMMON[:3], f"--batch_size={BATCH}", "--intra_op_threads=1",
              "--keep_checkpoints=10", f"--checkpoint_dir={tmp_path / 'ckpt'}"]
    hook, runs = module_hook(tmp_path, "horovod_train.data.tfrecord", LOG_BATCHES), {}
    for name, ranks, launcher, accum, stop in (
            ("writer", 2, "gloo", 3, 14), ("one", 1, None, 6, 15), ("three", 3, "mpi", 2, 20)):
        logs = tmp_path / f"ids-{name}"
        logs.mkdir()
        args = common + [f"--grad_accum_steps={accum}", f"--max_steps={stop}"]
        argv = horovodrun(ranks, launcher, args) if launcher else TRAIN + args
        runs[name] = (run_ranks(argv, tmp_path / name, TRAINED_IDS_DIR=str(logs),
                                PYTHONPATH=hook), logs)
    assert [runs[n][0]["steps"] for n in runs] == [14, 15, 20]
    writer, one, three = (runs[n][1] for n in runs)
    assert sorted(_trained(writer, 0)) == sorted(set(_trained(writer, 0)))
    assert len(_trained(writer, 0)) == RECORD_EPOCH * GLOBAL
    # Epoch 2 (index 1): 4 steps of 2 ranks, 1 of 1 rank, the last 5 of 3 ranks.
    epoch2 = _trained(writer, 1, 4) + _trained(one, 1, 1) + _trained(three, 1)
    assert len(_trained(three, 1)) == 5 * GLOBAL
    assert len(epoch2) == len(set(epoch2)) == RECORD_EPOCH * GLOBAL
    one_said = "epoch 2 continues with its 616 records not yet trained (384 were, in other " \
        "layouts), read by this launch's shards: 6 steps"
    three_said = "epoch 2 continues with its 520 records not yet trained (480 were, in other " \
        "layouts), read by this launch's shards: 5 steps"
    assert one_said in runs["one"][0]["_stderr"]
    assert three_said in runs["three"][0]["_stderr"]
    meta = json.loads((tmp_path / "ckpt" / "ckpt-000000015" / "meta.json").read_text())
    assert meta["position"] == {"epoch": 1, "epoch_examples": 480,
                                "layouts": [[2, 48, 384], [1, 96, 96]]}
    meta = json.loads((tmp_path / "ckpt" / "ckpt-000000020" / "meta.json").read_text())
    assert meta["position"] == {"epoch": 2, "epoch_examples": 0, "layouts": []}
