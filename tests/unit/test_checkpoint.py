"""Checkpoint files: atomic writes, keep-N, corrupt and foreign checkpoints. No TF needed:
the writer takes any array-likes, so numpy arrays stand in for variables."""
import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import ROOT
from horovod_train import checkpoint, checkpoint_fingerprint, fs, writer_lock
from horovod_train import config as cfg
from horovod_train.errors import UsageError

CONFIG = cfg.RunConfig()
STATE = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int64)]


def _arrays(step):
    return [a + step for a in STATE]


def test_save_then_load_round_trip_and_keep_n(tmp_path):
    for step in (10, 20, 30, 40):
        checkpoint.save(str(tmp_path), step, _arrays(step), CONFIG, keep=2)
    assert [s for s, _ in checkpoint.list_checkpoints(str(tmp_path))] == [40, 30]
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, STATE)
    assert step == 40
    for got, want in zip(arrays, _arrays(40)):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def test_corrupt_newest_is_skipped_for_the_previous(tmp_path, caplog):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    newest = checkpoint.save(str(tmp_path), 20, _arrays(20), CONFIG, keep=3)
    with open(os.path.join(newest, "state.npz"), "r+b") as f:
        f.truncate(40)
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, STATE)
    assert step == 10
    np.testing.assert_array_equal(arrays[0], _arrays(10)[0])
    assert "ckpt-000000020" in caplog.text and "unreadable" in caplog.text


def test_checkpoint_of_another_config_is_refused_naming_the_difference(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    other = cfg.RunConfig(model="digits_mlp", data=cfg.DataConfig(batch_size=64))
    with pytest.raises(UsageError) as err:
        checkpoint.load_latest(str(tmp_path), other, STATE)
    message = str(err.value)
    assert "model: checkpoint 'digits_cnn', now 'digits_mlp'" in message and "Fix" in message
    # The batch size is free to change: with the world size it makes the global batch,
    # which resume.py keeps (test_global_batch_...).
    assert "batch_size" not in message


_KILLED_WRITER = """
import os, signal, sys
import numpy as np
from horovod_train import checkpoint, config
real_rename = os.rename
def die_before_commit(src, dst):
    os.kill(os.getpid(), signal.SIGKILL)  # state.npz and meta.json are written, not renamed
os.rename = die_before_commit
checkpoint.save(sys.argv[1], 20, [np.full((2, 3), 99.0, np.float32), np.array(1)],
                config.RunConfig(), keep=3)
"""


def test_writer_killed_between_write_and_rename_leaves_previous_intact(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    partials = [n for n in os.listdir(tmp_path) if n.startswith(".partial-ckpt-")]
    assert partials and os.path.exists(tmp_path / partials[0] / "state.npz")  # killed mid-way
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, STATE)
    assert step == 10
    np.testing.assert_array_equal(arrays[0], _arrays(10)[0])
    checkpoint.save(str(tmp_path), 30, _arrays(30), CONFIG, keep=3)  # next save cleans up
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".partial-ckpt-")]


def _tmpfs(path, options):
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


def test_disk_full_is_a_clear_error_and_keeps_the_previous(tmp_path):
    small = tmp_path / "small"
    _tmpfs(small, "size=64k")
    try:
        checkpoint.save(str(small), 10, _arrays(10), CONFIG, keep=3)
        big = [np.ones((256, 256), np.float32)]  # 256 KiB: more than the disk holds
        with pytest.raises(UsageError) as err:
            checkpoint.save(str(small), 20, big + STATE[1:], CONFIG, keep=3)
        assert "No space left" in str(err.value) and "untouched" in str(err.value)
        assert [s for s, _ in checkpoint.list_checkpoints(str(small))] == [10]
        assert not [n for n in os.listdir(small) if n.startswith(".partial")]
        assert checkpoint.load_latest(str(small), CONFIG, STATE)[0] == 10
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_read_only_dir_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    _tmpfs(ro, "ro,size=64k")
    try:
        with pytest.raises(UsageError) as err:
            checkpoint.save(str(ro), 10, _arrays(10), CONFIG, keep=3)
        assert "Read-only file system" in str(err.value) and "--checkpoint_dir" in str(err.value)
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.parametrize("value", ["0", "-3", "e", "2x", "1.5"])
def test_bad_checkpoint_cadence_is_rejected(value):
    with pytest.raises(UsageError, match="--checkpoint_every"):
        cfg.TrainConfig(checkpoint_every=value)


def test_cadence_in_steps_or_epochs():
    assert cfg.TrainConfig(checkpoint_every="500").checkpoint_interval(22) == 500
    assert cfg.TrainConfig(checkpoint_every="2e").checkpoint_interval(22) == 44


# --- Prune: only readable checkpoints are counted or deleted (issue 17, item 1) ---

def _garbage(directory, step, meta_text="x"):
    path = directory / f"ckpt-{step:09d}"
    path.mkdir()
    (path / "meta.json").write_text(meta_text)
    return path


def test_prune_leaves_unreadable_dirs_alone_and_keeps_the_readable(tmp_path, caplog):
    for step in (900, 800):
        _garbage(tmp_path, step)
    for step in (10, 20, 30):
        checkpoint.save(str(tmp_path), step, _arrays(step), CONFIG, keep=2)
    assert [s for s, _ in checkpoint.list_checkpoints(str(tmp_path))] == [900, 800, 30, 20]
    assert (tmp_path / "ckpt-000000900" / "meta.json").read_text() == "x"  # untouched
    assert checkpoint.load_latest(str(tmp_path), CONFIG, STATE)[0] == 30
    warned = [r.getMessage() for r in caplog.records if "--keep_checkpoints" in r.getMessage()]
    assert len(warned) == 1, warned  # once over three saves, naming both
    assert "ckpt-000000900" in warned[0] and "ckpt-000000800" in warned[0]


@pytest.mark.parametrize("atomic", [True, False], ids=["rename", "file_by_file"])
def test_a_left_alone_directory_at_the_step_saved_is_set_aside_not_replaced(
        tmp_path, caplog, monkeypatch, atomic):
    """issue 55, item 9: the prune's warning says a directory whose meta.json differs from
    its COMMIT marker was "left alone", yet the fresh run's save at that step replaced
    it. It is moved aside under a name no checkpoint has, whole, and a line says so; on a
    store without atomic renames (gs://, s3://) file by file, the marker last."""
    if not atomic:
        monkeypatch.setenv(fs.NO_ATOMIC_RENAME_ENV, "1")
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    old = checkpoint.save(str(tmp_path), 30, _arrays(30), CONFIG, keep=3)
    meta = os.path.join(old, "meta.json")
    with open(meta, "a") as f:
        f.write(" ")  # a hand edit: meta.json differs from its COMMIT marker
    kept = {name: open(os.path.join(old, name), "rb").read() for name in os.listdir(old)}
    checkpoint.save(str(tmp_path), 20, _arrays(20), CONFIG, keep=3)
    assert "left alone" in caplog.text and "ckpt-000000030" in caplog.text
    fresh = checkpoint.save(str(tmp_path), 30, _arrays(31), CONFIG, keep=3)
    aside = [n for n in os.listdir(tmp_path) if n.startswith("ckpt-000000030.set-aside-")]
    assert len(aside) == 1, os.listdir(tmp_path)
    moved = tmp_path / aside[0]
    assert {n: (moved / n).read_bytes() for n in os.listdir(moved)} == kept  # whole, unchanged
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, STATE)
    assert (step, fresh) == (30, old)
    np.testing.assert_array_equal(arrays[0], _arrays(31)[0])
    said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == 1 and str(moved) in said[0] and "differs from its COMMIT" in said[0]
    # Never counted nor pruned: more saves with keep=1 leave it where it is.
    checkpoint.save(str(tmp_path), 40, _arrays(40), CONFIG, keep=1)
    assert sorted(os.listdir(tmp_path)) == [aside[0], "ckpt-000000040"]


def test_a_readable_checkpoint_at_the_step_saved_is_replaced_as_before(tmp_path):
    checkpoint.save(str(tmp_path), 30, _arrays(30), CONFIG, keep=3)
    checkpoint.save(str(tmp_path), 30, _arrays(31), CONFIG, keep=3)
    assert os.listdir(tmp_path) == ["ckpt-000000030"]
    np.testing.assert_array_equal(checkpoint.load_latest(str(tmp_path), CONFIG, STATE)[1][0],
                                  _arrays(31)[0])


def test_prune_never_deletes_the_checkpoint_just_written(tmp_path):
    checkpoint.save(str(tmp_path), 900, _arrays(900), CONFIG, keep=3)  # a newer, readable one
    written = checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=1)
    assert checkpoint.list_checkpoints(str(tmp_path)) == [(10, written)]


_KILLED_PRUNER = """
import os, shutil, signal, sys
import numpy as np
from horovod_train import checkpoint, config
real_rmtree = shutil.rmtree
def die_half_way(path, *args, **kwargs):
    if "ckpt-000000010" in path and os.path.isdir(path):  # the oldest: one file, then die
        os.remove(os.path.join(path, "state.npz"))
        os.kill(os.getpid(), signal.SIGKILL)
    return real_rmtree(path, *args, **kwargs)
shutil.rmtree = die_half_way
checkpoint.save(sys.argv[1], 30, [np.full((2, 3), 30.0, np.float32), np.array(37)],
                config.RunConfig(), keep=2)
"""


def test_prune_killed_mid_delete_leaves_no_half_checkpoint(tmp_path):
    for step in (10, 20):
        checkpoint.save(str(tmp_path), step, _arrays(step), CONFIG, keep=3)
    proc = subprocess.run([sys.executable, "-c", _KILLED_PRUNER, str(tmp_path)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # Every name list_checkpoints matches is a whole checkpoint (with its COMMIT marker,
    # issue 42); the half-deleted one was renamed aside before its files went.
    for _, path in checkpoint.list_checkpoints(str(tmp_path)):
        assert sorted(os.listdir(path)) == ["COMMIT", "meta.json", "state.npz"], path
    assert [s for s, _ in checkpoint.list_checkpoints(str(tmp_path))] == [30, 20]
    checkpoint.save(str(tmp_path), 40, _arrays(40), CONFIG, keep=2)  # cleans the leftover
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000030", "ckpt-000000040"]


# --- Malformed meta.json: skipped with a warning, like any unreadable one (item 12) ---

@pytest.mark.parametrize("meta", [
    "[1, 2]",                                                   # not an object
    '{"step": 20, "num_variables": 2}',                         # no fingerprint
    '{"step": 20, "num_variables": "2", "fingerprint": {}}',    # a string count
    '{"step": 20, "num_variables": 2, "fingerprint": [1]}',     # a list fingerprint
    '{"step": "20", "num_variables": 2, "fingerprint": {}}',    # a string step
    # Named (format 2): fewer names than arrays; then a format newer than this code reads.
    '{"step": 20, "num_variables": 2, "fingerprint": {}, "format": 2, "names": ["a"]}',
    '{"step": 20, "num_variables": 2, "fingerprint": {}, "format": 3, "names": ["a", "b"]}',
])
def test_malformed_meta_is_skipped_for_the_previous(tmp_path, caplog, meta):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    newest = checkpoint.save(str(tmp_path), 20, _arrays(20), CONFIG, keep=3)
    with open(os.path.join(newest, "meta.json"), "w") as f:
        f.write(meta)
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, STATE)
    assert step == 10
    np.testing.assert_array_equal(arrays[0], _arrays(10)[0])
    assert "ckpt-000000020" in caplog.text and "unreadable" in caplog.text


# --- Data shape, class count and world size belong to the fingerprint (items 11, 13) ---

DIGITS = {"input_shape": [8, 8, 1], "num_classes": 10}


def test_other_input_shape_or_class_count_is_refused_naming_it(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3, facts=DIGITS)
    with pytest.raises(UsageError) as err:
        checkpoint.load_latest(str(tmp_path), CONFIG, STATE,
                               facts={"input_shape": (28, 28, 1), "num_classes": 10})
    assert "input_shape: checkpoint [8, 8, 1], now [28, 28, 1]" in str(err.value)
    assert "num_classes" not in str(err.value) and "Fix" in str(err.value)
    same = {"input_shape": (8, 8, 1), "num_classes": 10}  # a tuple equals the stored list
    assert checkpoint.load_latest(str(tmp_path), CONFIG, STATE, facts=same)[0] == 10


def test_checkpoint_without_facts_is_accepted(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)  # written before facts
    facts = dict(DIGITS, world_size=4)
    assert checkpoint.load_latest(str(tmp_path), CONFIG, STATE, facts=facts)[0] == 10


def _sized(batch_size=32, accum=1, allow=False):
    return cfg.RunConfig(data=cfg.DataConfig(batch_size=batch_size),
                         speed=cfg.SpeedConfig(grad_accum_steps=accum),
                         train=cfg.TrainConfig(allow_global_batch_change=allow))


def test_another_world_size_loads_when_the_global_batch_is_kept(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), _sized(32), keep=3, facts={"world_size": 2})
    kept = [(_sized(32, 2), 1), (_sized(16, 1), 4), (_sized(64, 1), 1)]
    for config, ranks in kept:  # 2 x 32 x 1 = 1 x 32 x 2 = 4 x 16 x 1 = 1 x 64 x 1
        assert checkpoint.load_latest(str(tmp_path), config, STATE,
                                      facts={"world_size": ranks})[0] == 10


def test_another_global_batch_is_refused_unless_allowed(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), _sized(32), keep=3, facts={"world_size": 2})
    with pytest.raises(UsageError) as err:
        checkpoint.load_latest(str(tmp_path), _sized(32), STATE, facts={"world_size": 3})
    assert "global batch: checkpoint 64, now 96" in str(err.value)
    assert "\n" not in str(err.value)
    allowed = _sized(32, allow=True)
    assert checkpoint.load_latest(str(tmp_path), allowed, STATE, facts={"world_size": 3})[0] == 10


def test_written_by_reads_the_sizes_and_the_schedule_a_checkpoint_recorded(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), _sized(16, 3), keep=3,
                    facts={"world_size": 2}, record={"lr_schedule": {"scale": 2.0,
                                                                     "warmup_steps": 44}})
    meta = checkpoint.newest_meta(str(tmp_path))
    written = checkpoint_fingerprint.written_by(meta, CONFIG)
    assert (written.step, written.world_size, written.batch_size, written.accum_steps) == \
        (10, 2, 16, 3)
    assert written.global_batch == 96 and (written.lr_scale, written.warmup_steps) == (2.0, 44)
    # Older: no schedule recorded (a fresh start's rule), or no world size (None: too old).
    checkpoint.save(str(tmp_path), 20, _arrays(20), _sized(16, 3), keep=3, facts={"world_size": 4})
    older = checkpoint_fingerprint.written_by(checkpoint.newest_meta(str(tmp_path)), CONFIG)
    assert (older.lr_scale, older.warmup_steps) == (4.0, None)
    checkpoint.save(str(tmp_path), 30, _arrays(30), CONFIG, keep=3)
    assert checkpoint_fingerprint.written_by(checkpoint.newest_meta(str(tmp_path)), CONFIG) is None


class _Var:
    def __init__(self, shape, path):
        self.shape, self.path, self.value = shape, path, np.zeros(shape, np.float32)

    def assign(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype)


def test_stored_shape_is_compared_before_assigning(tmp_path):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)  # an old one: no facts
    path = os.path.join(tmp_path, "ckpt-000000010")
    variables = [_Var((2, 5), "dense/kernel"), _Var((), "count")]
    with pytest.raises(UsageError) as err:
        checkpoint.check_shapes(path, _arrays(10), variables)
    message = str(err.value)
    assert "dense/kernel" in message and "(2, 3)" in message and "(2, 5)" in message
    assert "Fix" in message
    checkpoint.check_shapes(path, _arrays(10), [_Var((2, 3), "k"), _Var((), "c")])


# --- Arrays keyed by variable path, not by position (issue 39, part 5) ---

def _named(*paths, shape=(2, 2)):
    return [_Var(shape, path) for path in paths]


def test_names_round_trip_through_meta_and_state(tmp_path):
    state = [_Var((2, 3), "dense/kernel"), _Var((), "adam/iteration"), _Var((), "loss_scale")]
    for i, variable in enumerate(state):
        variable.assign(np.full(variable.shape, i + 1.0, np.float32))
    path = checkpoint.save(str(tmp_path), 10, state, CONFIG, keep=3)
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    assert meta["format"] == 2
    assert meta["names"] == ["dense/kernel", "adam/iteration", "loss_scale"]  # in order
    with np.load(os.path.join(path, "state.npz")) as stored:
        assert sorted(stored.files) == sorted(meta["names"])
        np.testing.assert_array_equal(stored["dense/kernel"], np.ones((2, 3)))
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, state)
    assert step == 10 and [float(np.ravel(a)[0]) for a in arrays] == [1.0, 2.0, 3.0]


def test_swapped_same_shape_variables_are_refused_naming_the_first_difference(tmp_path):
    checkpoint.save(str(tmp_path), 10, _named("encoder/kernel", "decoder/kernel"), CONFIG, keep=3)
    with pytest.raises(UsageError) as err:  # positionally, this loads without a word
        checkpoint.load_latest(str(tmp_path), CONFIG, _named("decoder/kernel", "encoder/kernel"))
    message = str(err.value)
    assert "holds 'encoder/kernel' at position 0 of its 2 variables, where this model has " \
        "'decoder/kernel' (of 2)" in message
    assert "ckpt-000000010" in message and "Fix:" in message and "\n" not in message
    with pytest.raises(UsageError, match=r"holds nothing at position 2 of its 2 variables, "
                                         r"where this model has 'extra/bias' \(of 3\)"):
        checkpoint.load_latest(str(tmp_path), CONFIG,
                               _named("encoder/kernel", "decoder/kernel", "extra/bias"))


def test_two_variables_with_one_path_are_refused_before_writing(tmp_path):
    with pytest.raises(UsageError) as err:
        checkpoint.save(str(tmp_path), 10, _named("dense/kernel", "head/bias", "dense/kernel"),
                        CONFIG, keep=3)
    message = str(err.value)
    assert "'dense/kernel' names variables 0 and 2" in message and "Fix:" in message
    assert not os.path.exists(tmp_path) or not os.listdir(tmp_path)


def _positional(directory, step, arrays):
    """A checkpoint as written before issue 39: arrays keyed v00000..., no names."""
    path = directory / f"ckpt-{step:09d}"
    path.mkdir()
    np.savez(path / "state.npz", **{f"v{i:05d}": a for i, a in enumerate(arrays)})
    (path / "meta.json").write_text(json.dumps({"step": step, "num_variables": len(arrays),
                                                "fingerprint": checkpoint_fingerprint.fingerprint(CONFIG)}))


def test_an_old_positional_checkpoint_still_loads_by_position(tmp_path):
    _positional(tmp_path, 10, _arrays(10))
    state = [_Var((2, 3), "dense/kernel"), _Var((), "count")]
    step, arrays = checkpoint.load_latest(str(tmp_path), CONFIG, state)
    assert step == 10
    for got, want in zip(arrays, _arrays(10)):
        np.testing.assert_array_equal(got, want)
    # Its count and shapes are all it can be checked by, and they still are.
    with pytest.raises(UsageError, match="variables: checkpoint 2, now 3"):
        checkpoint.load_latest(str(tmp_path), CONFIG, _named("a", "b", "c", shape=()))
    with pytest.raises(UsageError, match=r"shape \(2, 3\) for variable 0 \(dense/kernel\)"):
        checkpoint.load_latest(str(tmp_path), CONFIG, [_Var((2, 5), "dense/kernel"), state[1]])


# --- One writer per directory (item 2) ---

_HOLDER = """
import sys, time
from horovod_train import writer_lock
writer_lock.acquire_writer_lock(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def _hold_lock(directory, **env):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(directory)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT, **env),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    holder = _hold_lock(tmp_path, SLURM_JOB_ID="4242")
    try:
        with pytest.raises(UsageError) as err:
            writer_lock.acquire_writer_lock(str(tmp_path))
        message = str(err.value)
        assert f"pid {holder.pid}" in message and "SLURM_JOB_ID=4242" in message
        assert os.uname().nodename in message and "\n" not in message
        assert "Fix: give each job its own --checkpoint_dir" in message
        assert "free space" not in message
    finally:
        holder.kill()
        holder.wait()
    # The kernel drops the lock of a killed holder: its relaunch is never blocked.
    handle = writer_lock.acquire_writer_lock(str(tmp_path))
    writer_lock.release_writer_lock(handle)


def test_the_lock_is_released_on_close_and_at_exit(tmp_path):
    handle = writer_lock.acquire_writer_lock(str(tmp_path))
    writer_lock.release_writer_lock(handle)
    assert os.listdir(tmp_path) == []  # a finished run leaves its directory as it found it
    holder = _hold_lock(tmp_path)  # another process can take it now
    holder.kill()
    holder.wait()
    assert os.listdir(tmp_path) == [writer_lock.LOCK_NAME]  # killed: stale, and harmless
    subprocess.run([sys.executable, "-c", "import sys; from horovod_train import writer_lock; "
                    "writer_lock.acquire_writer_lock(sys.argv[1])", str(tmp_path)],
                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    assert os.listdir(tmp_path) == []  # an exit without close releases it too


def test_where_flock_is_refused_a_lease_guards_the_directory(tmp_path, monkeypatch):
    def no_flock(handle, flags):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))  # some NFS mounts
    monkeypatch.setattr(writer_lock.fcntl, "flock", no_flock)
    (tmp_path / writer_lock.LEASE_NAME).write_text(json.dumps(
        {"pid": 4242, "host": "other-host", "token": "theirs", "renewed": time.time()}))
    with pytest.raises(UsageError, match=r"\(pid 4242, on other-host; its lease .* was renewed"):
        writer_lock.acquire_writer_lock(str(tmp_path))
    os.remove(tmp_path / writer_lock.LEASE_NAME)
    key = writer_lock.acquire_writer_lock(str(tmp_path))
    assert json.loads((tmp_path / writer_lock.LEASE_NAME).read_text())["pid"] == os.getpid()
    writer_lock.release_writer_lock(key)
    assert os.listdir(tmp_path) == [writer_lock.LOCK_NAME]  # the lease gone, the flock file empty


def test_a_vanished_temp_dir_is_not_called_a_full_disk(tmp_path, monkeypatch):
    real_rename = os.rename

    def deleted_by_someone_else(src, dst):
        import shutil
        shutil.rmtree(src)
        return real_rename(src, dst)
    monkeypatch.setattr(os, "rename", deleted_by_someone_else)
    with pytest.raises(UsageError) as err:
        checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3)
    message = str(err.value)
    assert "free space" not in message and "vanished" in message
    assert "each job its own --checkpoint_dir" in message


# --- The Checkpointer: every rank takes the chief's verdict ---

class _Backend:
    def __init__(self, rank=0, size=1):
        from horovod_train.backends.base import ProcessInfo
        self.info = ProcessInfo(rank=rank, size=size)

    def broadcast_variables(self, variables):
        pass


def _checkpointer(tmp_path, rank=0, size=1, **kwargs):
    config = cfg.RunConfig(train=cfg.TrainConfig(checkpoint_dir=str(tmp_path), checkpoint_every="10"))
    variables = [_Var((2, 3), "kernel"), _Var((), "count")]
    return checkpoint.Checkpointer(config, _Backend(rank, size), variables, 10, **kwargs)


@pytest.fixture
def sent(monkeypatch):
    """The rows this process's Checkpointers agree on. _agree is an allreduce (TF):
    here a chief's row is the one it sent, and a test can replay it to another rank."""
    rows = []
    monkeypatch.setattr(checkpoint.Checkpointer, "_agree",
                        lambda self, values: rows.append(list(values)) or list(values))
    return rows


def test_checkpointer_writes_facts_world_size_schedule_and_position_and_restores(tmp_path, sent):
    schedule = {"scale": 1.0, "warmup_steps": 5}
    ckpt = _checkpointer(tmp_path, data_facts=DIGITS, schedule=schedule)
    assert ckpt.restore() == (0, None)
    for variable, value in zip(ckpt.variables, _arrays(10)):
        variable.assign(value)
    ckpt.maybe_save(10, position=(0, 320, [[2, 32, 128], [1, 32, 192]]))
    ckpt.close()
    with open(tmp_path / "ckpt-000000010" / "meta.json") as f:
        meta = json.load(f)
    assert meta["fingerprint"]["world_size"] == 1 and meta["fingerprint"]["input_shape"] == [8, 8, 1]
    assert meta["lr_schedule"] == schedule
    assert meta["position"] == {"epoch": 0, "epoch_examples": 320,
                                "layouts": [[2, 32, 128], [1, 32, 192]]}
    again = _checkpointer(tmp_path, data_facts=DIGITS)
    assert again.restore() == (10, (0, 320))  # the step, and the position in examples
    np.testing.assert_array_equal(again.variables[0].value, _arrays(10)[0])
    again.close()


def test_checkpointer_refusal_reaches_every_rank(tmp_path, sent, monkeypatch):
    checkpoint.save(str(tmp_path), 10, _arrays(10), CONFIG, keep=3, facts={"world_size": 1})
    chief = _checkpointer(tmp_path, rank=0, size=2)  # global batch 64, the checkpoint's 32
    with pytest.raises(UsageError, match="global batch: checkpoint 32, now 64"):
        chief.restore()
    chief.close()
    # Rank 1 never reads the directory: it gets the chief's row, and points to its words.
    monkeypatch.setattr(checkpoint.Checkpointer, "_agree", lambda self, values: sent[-1])
    with pytest.raises(UsageError, match="the chief refused the checkpoint .*rank 0's message"):
        _checkpointer(tmp_path, rank=1, size=2).restore()


def test_checkpointer_refuses_a_foreign_writer_before_reading(tmp_path, sent):
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(UsageError, match=f"pid {holder.pid}"):
            _checkpointer(tmp_path).restore()
    finally:
        holder.kill()
        holder.wait()
