"""Issue 42 item 4: checkpoints on a filesystem without atomic rename, proven on
TensorFlow's ram:// (a directory "rename" there moves the name without its files; it
lives inside one process, so everything here runs in this one). Written under the final
name with a COMMIT marker last; only committed ones are loaded or counted; a torn write
is never picked, and the writer cleans what is provably its own leftover. A real child
killed mid-write on such a filesystem: tests/unit/test_checkpoint_commit.py. Where there
is no flock (a URL), the writer lock is a lease: refused while fresh, taken over when
stale or when its holder on this host is gone, renewed, and lost to a newer holder."""
import json
import logging
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from horovod_train import checkpoint, fs  # noqa: E402
from horovod_train import checkpoint_commit as commit  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop, outputs, writer_lock  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

CONFIG = cfg.RunConfig()
STATE = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int64)]
WHOLE = ["COMMIT", "meta.json", "state.npz"]


def _arrays(step):
    return [a + step for a in STATE]


def _steps(directory) -> list[int]:
    return [step for step, _ in checkpoint.list_checkpoints(directory)]


def _loads(directory, step):
    found, arrays = checkpoint.load_latest(directory, CONFIG, STATE)
    assert found == step
    for got, want in zip(arrays, _arrays(step)):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def _copy(src: str, dst: str, files):
    """A torn write, made by hand: some of a whole checkpoint's files, copied."""
    tf.io.gfile.makedirs(dst)
    for name in files:
        tf.io.gfile.copy(f"{src}/{name}", f"{dst}/{name}")


def test_save_load_and_keep_n_on_ram(ram):
    directory = f"{ram}/ck"
    assert not fs.renames_atomically(directory)
    for step in (10, 20, 30, 40):
        checkpoint.save(directory, step, _arrays(step), CONFIG, keep=2)
    assert _steps(directory) == [40, 30]
    assert sorted(fs.listdir(directory)) == ["ckpt-000000030", "ckpt-000000040"]
    assert sorted(fs.listdir(f"{directory}/ckpt-000000040")) == WHOLE
    marker = json.loads(fs.read_text(f"{directory}/ckpt-000000040/COMMIT"))
    assert marker["step"] == 40
    assert marker["files"]["state.npz"]["size"] == fs.stat(
        f"{directory}/ckpt-000000040/state.npz").size
    assert json.loads(fs.read_text(f"{directory}/ckpt-000000040/meta.json"))["commit"] == "marker"
    _loads(directory, 40)


def test_a_torn_write_is_never_picked_and_the_writer_cleans_only_its_own(ram, caplog):
    directory = f"{ram}/ck"
    whole = checkpoint.save(directory, 10, _arrays(10), CONFIG, keep=5)
    damaged = checkpoint.save(directory, 40, _arrays(40), CONFIG, keep=5)
    # Files present, marker absent: the write was cut before its commit.
    _copy(whole, f"{directory}/ckpt-000000050", ["meta.json", "state.npz"])
    # A marker whose sizes do not match: state.npz damaged after its commit.
    with tf.io.gfile.GFile(f"{damaged}/state.npz", "wb") as f:
        f.write(b"x")  # ram:// "wb" appends: now one byte longer than marked
    # A marker for another step (a whole checkpoint copied under a new name).
    _copy(whole, f"{directory}/ckpt-000000030", WHOLE)
    # A write cut before meta.json, and one cut between its open and its first byte.
    tf.io.gfile.makedirs(f"{directory}/ckpt-000000020")
    _copy(whole, f"{directory}/ckpt-000000015", ["meta.json"])
    fs.write_stream(f"{directory}/ckpt-000000015/COMMIT", lambda f: None)
    assert fs.stat(f"{directory}/ckpt-000000015/COMMIT").size == 0
    for step in (50, 40, 30, 20, 15):
        assert commit.inspect(f"{directory}/ckpt-{step:09d}").why_not, step
    with caplog.at_level(logging.WARNING):
        _loads(directory, 10)
    skipped = [r.getMessage() for r in caplog.records if "trying the previous" in r.getMessage()]
    assert len(skipped) == 5, skipped
    assert "ckpt-000000050 is unreadable (not committed: no COMMIT marker; a write" in skipped[0]
    assert "state.npz has" in skipped[1] and "marker is for step 10" in skipped[2]

    caplog.clear()
    checkpoint.save(directory, 60, _arrays(60), CONFIG, keep=2)
    # Cut-short writes of this code are gone; the damaged and the misnamed, both with a
    # marker, are left for a person and not counted: 60 and 10 are kept.
    assert _steps(directory) == [60, 40, 30, 10]
    left = [r.getMessage() for r in caplog.records if "left alone" in r.getMessage()]
    assert len(left) == 1 and "ckpt-000000040" in left[0] and "ckpt-000000030" in left[0]
    _loads(directory, 60)


def test_a_checkpoint_of_an_older_version_counts_only_where_renames_are_atomic(ram, tmp_path):
    """Older versions committed by rename alone (no marker): trusted on a local disk,
    where such a directory appeared whole; on ram:// only a marker commits, and a copy
    of one is left alone (not loaded, not counted, not deleted)."""
    for directory in (str(tmp_path / "ck"), f"{ram}/ck"):
        checkpoint.save(directory, 10, _arrays(10), CONFIG, keep=5)
        old = checkpoint.save(directory, 20, _arrays(20), CONFIG, keep=5)
        meta = json.loads(fs.read_text(f"{old}/meta.json"))
        del meta["commit"]
        for name in ("COMMIT", "meta.json"):  # ram:// "wb" appends: remove, then write
            fs.remove(f"{old}/{name}")
        fs.write_stream(f"{old}/meta.json", lambda f: f.write(json.dumps(meta).encode()))
        local = fs.renames_atomically(directory)
        _loads(directory, 20 if local else 10)
        checkpoint.save(directory, 30, _arrays(30), CONFIG, keep=1)
        assert _steps(directory) == ([30] if local else [30, 20])
        assert local == (directory == str(tmp_path / "ck"))


def test_a_run_checkpoints_to_ram_and_a_relaunch_resumes_there(ram, tmp_path, caplog,
                                                                monkeypatch):
    def config(max_steps):
        return cfg.RunConfig(
            train=cfg.TrainConfig(epochs=1, max_steps=max_steps, log_every=4, eval_every_epochs=0,
                                  checkpoint_dir=f"{ram}/ck", checkpoint_every="4",
                                  keep_checkpoints=1),
            observe=cfg.ObserveConfig(run_dir=str(tmp_path / f"run{max_steps}"), baseline_cache=""),
            runtime=cfg.RuntimeConfig(backend="local"))
    monkeypatch.chdir(tmp_path)
    outputs.check_writable(config(8))  # the chief's probe, through the URL's filesystem
    assert fs.listdir(ram) == ["ck"] and fs.listdir(f"{ram}/ck") == []
    assert loop.run(config(8))["steps"] == 8
    assert _steps(f"{ram}/ck") == [8]
    assert sorted(fs.listdir(f"{ram}/ck")) == ["ckpt-000000008"]  # its lease released
    keras.backend.clear_session()  # a relaunch's fresh names (adam, not adam_1)
    # The absl logger's own level: another test in this process may have raised it.
    with caplog.at_level(logging.INFO, logger="absl"):
        assert loop.run(config(12))["steps"] == 12
    assert "resumed from step 8" in caplog.text
    assert _steps(f"{ram}/ck") == [12]
    assert sorted(os.listdir(tmp_path)) == ["run12", "run8"]  # nothing local named ram:


# --- The writer lease where there is no flock ---

def _lease(directory, age=5.0, **who):
    """Another job's lease, renewed `age` seconds ago."""
    holder = dict({"host": "other-host", "pid": 4242, "job": "SLURM_JOB_ID=7",
                   "started": "2026-01-02T03:04:05", "token": "theirs"}, **who,
                  renewed=time.time() - age)
    fs.makedirs(directory)
    fs.write_atomic(f"{directory}/{writer_lock.LEASE_NAME}", json.dumps(holder).encode())


def _holder(directory) -> dict:
    return json.loads(fs.read_text(f"{directory}/{writer_lock.LEASE_NAME}"))


def test_a_fresh_lease_refuses_a_second_job_naming_it_and_a_stale_one_is_taken_over(ram, caplog):
    directory, lease = f"{ram}/ck", f"{ram}/ck/{writer_lock.LEASE_NAME}"
    _lease(directory)
    with pytest.raises(writer_lock.ForeignWriter) as err:
        writer_lock.acquire_writer_lock(directory)
    message = str(err.value)
    assert f"received '{directory}', which another job is writing to (pid 4242, on other-host, " \
        f"SLURM_JOB_ID=7, since 2026-01-02T03:04:05; its lease {lease} was renewed 5 s ago)" \
        in message and "\n" not in message
    assert "Fix: give each job its own --checkpoint_dir, or wait until that job ends (a lease " \
        f"not renewed for 300 s is taken over; if that job is surely gone, delete {lease})" in message
    assert _holder(directory)["token"] == "theirs"  # the refused job changed nothing

    _lease(directory, age=writer_lock.LEASE_STALE_S + 60)
    with caplog.at_level(logging.WARNING):
        key = writer_lock.acquire_writer_lock(directory)
    assert f"took over the writer lease {lease} of pid 4242, on other-host" in caplog.text
    assert "not renewed for 360 s, more than 300 s" in caplog.text
    mine = _holder(directory)
    assert mine["pid"] == os.getpid() and mine["host"] == socket.gethostname()
    assert time.time() - mine["renewed"] < 60
    writer_lock.release_writer_lock(key)
    assert fs.listdir(directory) == []  # released: the lease is gone


def test_a_lease_of_a_process_gone_from_this_host_is_taken_over_a_live_one_is_not(ram, caplog):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    directory, here = f"{ram}/ck", socket.gethostname()
    _lease(directory, host=here, pid=os.getppid())  # alive: this test's parent
    with pytest.raises(writer_lock.ForeignWriter, match=f"pid {os.getppid()}, on {here}"):
        writer_lock.acquire_writer_lock(directory)
    _lease(directory, host=here, pid=int(gone.stdout))
    with caplog.at_level(logging.WARNING):
        key = writer_lock.acquire_writer_lock(directory)
    assert f"its process {int(gone.stdout)} on this host is gone" in caplog.text
    writer_lock.release_writer_lock(key)


def test_the_lease_is_renewed_while_held_and_a_lost_one_stops_the_saves(ram, monkeypatch):
    monkeypatch.setattr(writer_lock, "LEASE_RENEW_S", 0.05)
    config = cfg.RunConfig(train=cfg.TrainConfig(checkpoint_dir=f"{ram}/ck", checkpoint_every="1"))
    state = [tf.Variable(a, name=name) for a, name in zip(STATE, ("kernel", "count"))]
    ckpt = checkpoint.Checkpointer(config, LocalBackend(), state, 1)
    try:
        assert ckpt.restore()[0] == 0
        first = _holder(f"{ram}/ck")["renewed"]
        deadline = time.monotonic() + 30
        while _holder(f"{ram}/ck")["renewed"] == first:  # the renewing thread
            assert time.monotonic() < deadline, "the lease was not renewed"
            time.sleep(0.05)
        ckpt.maybe_save(1)
        assert _steps(f"{ram}/ck") == [1]
        _lease(f"{ram}/ck", age=0)  # another job took it over (it judged ours stale)
        with pytest.raises(UsageError, match="pid 4242, on other-host"):
            ckpt.maybe_save(2)
        assert _steps(f"{ram}/ck") == [1]  # nothing written without the lease
        assert _holder(f"{ram}/ck")["token"] == "theirs"
        fs.remove(f"{ram}/ck/{writer_lock.LEASE_NAME}")  # that job ended: still lost for good
        with pytest.raises(UsageError, match="pid 4242, on other-host"):
            ckpt.maybe_save(3)
        _lease(f"{ram}/ck", age=0)
    finally:
        ckpt.close()
    assert _holder(f"{ram}/ck")["token"] == "theirs"  # not ours to delete
