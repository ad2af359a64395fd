"""hvd.elastic for Keras (`import horovod_train.keras as hvd`) under elastic horovodrun,
with real ranks: a Horovod-style elastic script (keras_elastic_script.py) loses a rank
mid-epoch and finishes on the survivors from the last commit (3 -> 2), and gains a rank
mid-run that starts from the others' state (2 -> 3).

The hosts are test_elastic.py's: `localhost` and `127.0.0.1` are two names Horovod's
driver treats as different hosts, both local, so no ssh is needed. The rank that dies
is the one on 127.0.0.1 (1 slot): Horovod's driver then blacklists that host (no
cooldown given), so the ring re-forms at 2 and stays there.

Both runs pass --divergence_check_steps=10 to our DistributedOptimizer, so its in-step
check of the ranks' weights runs in the re-formed ring too (its traced table is sized
by the ring).
"""
import json
import os
import sys
import uuid

import pytest

from ranks import BIN, start_job
from test_elastic import DEAD_PEER_TIMEOUT, Log

pytest.importorskip("horovod.tensorflow")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_elastic_script.py")
EPOCHS, BATCH, LR, EVERY = 6, 32, 0.002, 5  # the script's defaults, written out
TRAIN_SAMPLES = 1400
KILL_AT = (2, 7)  # (epoch, batch): mid-epoch, two batches past a commit
ALL_HOSTS = "localhost:2\n127.0.0.1:1\n"


def steps_per_epoch(size: int) -> int:
    return (TRAIN_SAMPLES // size) // BATCH  # as the script computes them


def last_commit(epoch: int, batch: int, steps: int) -> tuple[int, int, int]:
    """(state.epoch, state.batch, optimizer updates) of the last commit before a rank
    dies after `batch` of `epoch`, on the first attempt. CommitStateCallback commits
    after every EVERY-th batch (its count runs on across epochs) and at each epoch end
    (then batch 0 of the next epoch); the dying rank leaves before its callbacks commit."""
    dead_at = epoch * steps + batch
    commits = [(i // steps, i % steps, i + 1) for i in range(dead_at) if (i + 1) % EVERY == 0]
    commits += [(e + 1, 0, (e + 1) * steps) for e in range(epoch)]
    return max(commits, key=lambda c: (c[2], c[0]))


def discovery(tmp_path, hosts_text):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(hosts_text)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    return hosts, script


def elastic_job(tmp_path, np_, min_np, hosts_text, **env):
    """The script under elastic horovodrun --gloo (max 3 ranks), started in the
    background; returns (its Log, the hosts file, the results dir)."""
    hosts, script = discovery(tmp_path, hosts_text)
    results = tmp_path / "results"
    results.mkdir()
    argv = [os.path.join(BIN, "horovodrun"), "-np", str(np_), "--min-np", str(min_np),
            "--max-np", "3", "--host-discovery-script", str(script), "--gloo",
            sys.executable, SCRIPT, f"--result_dir={results}", f"--epochs={EPOCHS}",
            f"--batch_size={BATCH}", f"--lr={LR}", f"--batches_per_commit={EVERY}",
            "--divergence_check_steps=10"]
    return Log(start_job(argv, uuid.uuid4().hex, **DEAD_PEER_TIMEOUT, **env)), hosts, results


def read_results(results) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in results.glob("*.json")),
                  key=lambda r: r["rank"])


def check_finished_alike(ranks, size):
    """Every rank finished every epoch in a ring of `size`, with the same weights."""
    assert sorted(r["rank"] for r in ranks) == list(range(size)), ranks
    for r in ranks:
        assert (r["size"], r["epoch"]) == (size, EPOCHS), r
        assert r["accuracy"] >= 0.85, r
        assert r["lr"] == pytest.approx(LR * size), r  # the reset callback's, rank 0's
    assert len({r["digest"] for r in ranks}) == 1, [r["digest"] for r in ranks]
    assert len({r["accuracy"] for r in ranks}) == 1
    assert len({r["iterations"] for r in ranks}) == 1


def figures(label, ranks):
    print(f"\n[keras elastic] {label}: sizes {[e['size'] for e in ranks[0]['entries']]}, "
          f"train() entered {[r['attempts'] for r in ranks]} times (by final rank), resumed "
          f"at {[(e['epoch'], e['batch']) for e in ranks[0]['entries']]}, "
          f"{ranks[0]['iterations']} updates, digests equal ({ranks[0]['digest'][:12]}), "
          f"accuracy {ranks[0]['accuracy']:.4f}")


def test_a_lost_rank_rolls_the_survivors_back_to_the_last_commit_and_they_finish(tmp_path):
    marker = tmp_path / "killed"
    log, _, results = elastic_job(tmp_path, 3, 2, ALL_HOSTS, HT_KILL_HOST="127.0.0.1",
                                  HT_KILL_AT="%d:%d" % KILL_AT, HT_KILL_MARKER=marker)
    assert log.finish(timeout=240) == 0, log.text[-6000:]
    assert marker.exists(), "the chosen rank never died:\n" + log.text[-4000:]
    ranks = read_results(results)
    assert len(ranks) == 2, ranks  # the dead rank wrote nothing; no worker replaced it
    check_finished_alike(ranks, 2)
    epoch, batch, updates = last_commit(*KILL_AT, steps_per_epoch(3))
    assert (epoch, batch, updates) == (2, 6, 35)  # the schedule as this test reads it
    for r in ranks:
        assert r["host"] == "localhost" and r["attempts"] == 2, r
        first, second = r["entries"]
        assert (first["size"], first["epoch"], first["batch"]) == (3, 0, 0), r
        # Rolled back to the last commit, in the re-formed ring; the reset callback
        # already saw the new size (its learning rate is the one the sync spread).
        assert (second["rank"], second["size"], second["epoch"], second["batch"]) == \
            (r["rank"], 2, epoch, batch), r
        assert second["lr"] == pytest.approx(LR * 2), r
    # The committed updates plus the epochs left, each whole at the new size: Keras 3
    # runs every step of the resumed epoch (UpdateBatchStateCallback's shortened
    # params["steps"] reaches only the callbacks, as in Horovod's under Keras 2).
    assert ranks[0]["iterations"] == updates + (EPOCHS - epoch) * steps_per_epoch(2)
    figures("3 -> 2", ranks)


def test_an_added_host_grows_the_ring_and_the_newcomer_starts_from_the_commit(tmp_path):
    # 127.0.0.1 and one slot of localhost first; the second localhost slot comes once
    # the job trains. Slow batches (0.1 s) while the ring has 2 ranks leave the driver
    # time to see it mid-run; the grown ring runs at full speed.
    log, hosts, results = elastic_job(tmp_path, 2, 2, "localhost:1\n127.0.0.1:1\n",
                                      HT_SLOW_BATCH_S="0.1", HT_SLOW_WHILE_BELOW="3")
    log.wait_for(r"Epoch 1/", timeout=180)
    hosts.write_text(ALL_HOSTS)
    assert log.finish(timeout=240) == 0, log.text[-6000:]
    ranks = read_results(results)
    assert len(ranks) == 3, ranks
    check_finished_alike(ranks, 3)
    newcomers = [r for r in ranks if r["attempts"] == 1]
    assert len(newcomers) == 1, ranks
    joined = newcomers[0]["entries"][0]
    assert joined["size"] == 3, newcomers
    epoch, batch = joined["epoch"], joined["batch"]
    assert epoch < EPOCHS - 1, "the ring grew too late to test much"
    for r in ranks:
        if r is newcomers[0]:
            continue
        assert r["attempts"] == 2, r
        first, second = r["entries"]
        assert (first["size"], first["epoch"], first["batch"]) == (2, 0, 0), r
        # Interrupted at a commit (nothing to roll back), then the same state as the
        # newcomer's, which came from rank 0 at the sync.
        assert (second["size"], second["epoch"], second["batch"]) == (3, epoch, batch), r
        assert second["lr"] == pytest.approx(LR * 3), r
    # The commit's updates (after batch `batch`, or at the end of epoch `epoch - 1`
    # when batch is 0), then the epochs left whole at size 3.
    steps2, steps3 = steps_per_epoch(2), steps_per_epoch(3)
    committed = {epoch * steps2 + batch + 1} | ({epoch * steps2} if batch == 0 else set())
    assert ranks[0]["iterations"] - (EPOCHS - epoch) * steps3 in committed, ranks[0]
    figures("2 -> 3", ranks)
