"""Issue 41 item 2: each TFRecord file verified once, split across ranks, remembered
beside the data (the ranks themselves: tests/multiprocess/test_local_phases.py)."""
import os

import numpy as np
import pytest

pytest.importorskip("tensorflow")
from horovod_train import config as cfg  # noqa: E402
from horovod_train.data import convert, tfrecord, verdicts  # noqa: E402
from horovod_train.data import schema as schema_lib  # noqa: E402


@pytest.fixture
def data_dir(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x_train=rng.random((40, 4, 4, 1), np.float32),
             y_train=rng.integers(0, 3, 40), x_test=rng.random((12, 4, 4, 1), np.float32),
             y_test=rng.integers(0, 3, 12))
    out = tmp_path / "tfr"
    convert.convert(convert.ConvertOptions(str(tmp_path / "d.npz"), str(out), num_shards=4,
                                           progress=False))
    return str(out)


def _load(data_dir, **kwargs):
    return tfrecord.load(cfg.DataConfig(dataset="tfrecord", data_dir=data_dir, **kwargs))


def test_a_relaunch_scans_only_what_changed(data_dir, monkeypatch):
    scanned = []
    real = tfrecord.verify.scan_files
    monkeypatch.setattr(tfrecord.verify, "scan_files",
                        lambda paths, *a: scanned.append(len(paths)) or real(paths, *a))
    first = _load(data_dir)
    assert sum(scanned) == 8 and os.path.isfile(os.path.join(data_dir, verdicts.MEMORY_FILE))
    scanned.clear()
    again = _load(data_dir)
    assert sum(scanned) == 0 and again.train.counts == first.train.counts
    train0 = os.path.join(data_dir, first.train.paths[0])
    os.utime(train0, ns=(1, 1))  # a rewritten file: its time changes
    scanned.clear()
    _load(data_dir)
    assert sum(scanned) == 1


def test_damage_is_refused_from_memory_too_and_a_fix_is_seen(data_dir):
    first = _load(data_dir)
    path = first.train.paths[1]
    original = open(path, "rb").read()
    with open(path, "r+b") as f:  # a record's payload, its CRC now wrong
        f.seek(20)
        f.write(b"\xff\xff\xff\xff")
    for _ in range(2):  # scanned, then remembered: the same refusal
        with pytest.raises(Exception, match=r"unreadable record at index 0"):
            _load(data_dir)
    skipping = _load(data_dir, skip_corrupt=True)
    assert skipping.skipped > 0
    with open(path, "wb") as f:
        f.write(original)
    assert _load(data_dir).train.counts == first.train.counts


def test_a_data_directory_that_cannot_take_the_memory_falls_back_to_the_users_cache(
        data_dir, tmp_path):
    """A directory in the memory file's place makes the write beside the data fail for
    root too (a chmod would not: these tests run as root); the user's cache takes it."""
    key = schema_lib.digest(data_dir)
    cache = tmp_path / "cache"
    memory = verdicts.Memory(data_dir, key, cache_root=str(cache))
    paths = [os.path.join(data_dir, name) for name in sorted(os.listdir(data_dir))
             if name.endswith(".tfrecord")]
    blocked = os.path.join(data_dir, verdicts.MEMORY_FILE)
    os.mkdir(blocked)
    memory.remember(paths, {0: verdicts.Verdict(10)})
    assert os.path.isdir(blocked) and len(list(cache.glob("*.json"))) == 1
    assert not [n for n in os.listdir(data_dir) if n.endswith(".partial")]  # no leftovers
    assert verdicts.Memory(data_dir, key, str(cache)).known(paths) == {0: verdicts.Verdict(10)}
    assert verdicts.Memory(data_dir, "another schema", str(cache)).known(paths) == {}
    os.rmdir(blocked)
    memory.forget()
    assert memory.known(paths) == {}


def test_scan_files_counts_each_file_and_finds_a_bad_record_in_its_own_file(tmp_path):
    """One joined pipeline, the check in one parallel map: counts stay per file (an
    empty file too), and a bad record sends only its own file to the per-file scan."""
    import tensorflow as tf
    from horovod_train.data import decode, verify, writers
    schema = schema_lib.Schema("image", (2, 2, 1), "uint8", 3)
    good, bad = writers.image_example(bytes(4), 1), writers.image_example(bytes(4), 7)
    layout = [[good] * 3, [], [good] * 5, [good, bad, good]]
    paths = []
    for i, records in enumerate(layout):
        paths.append(str(tmp_path / f"f{i}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as w:
            for record in records:
                w.write(record)
    check = decode.checker(schema)
    for batch_check in (None, decode.batch_checker(schema)):
        scans = verify.scan_files(paths[:3], tf.data.TFRecordDataset, check, batch_check)
        assert [len(s.good) for s in scans] == [3, 0, 5] and all(s.error is None for s in scans)
        scans = verify.scan_files(paths, tf.data.TFRecordDataset, check, batch_check)
        assert [len(s.good) for s in scans] == [3, 0, 5, 2]
        assert [s.first_bad for s in scans] == [None, None, None, 1]
        assert scans[3].error == verify.BAD_VALUES


@pytest.mark.parametrize("schema, records", [
    (schema_lib.Schema("image", (2, 2, 1), "uint8", 3),
     [({"image": bytes(4)}, 1), ({"image": bytes(4)}, 3), ({"image": bytes(4)}, -1),
      ({"image": bytes(5)}, 0), ({"image": bytes(3)}, 0)]),
    (schema_lib.Schema("image", (2, 1), "float32", 2),
     [({"image": bytes(8)}, 1), ({"image": bytes(6)}, 1), ({"image": bytes(4)}, 0)]),
    (schema_lib.Schema("tokens", (3,), "int32", 5), [
        ({"tokens": [0, 1, 2]}, 4), ({"tokens": [0, -1, 2]}, 0), ({"tokens": [9, 9, 9]}, 5)]),
    (schema_lib.Schema("tokens", (3,), "int32", 5, task="lm"), [
        ({"tokens": [0, 1, 4]}, None), ({"tokens": [0, 5, 2]}, None), ({"tokens": [-2, 0, 0]},
                                                                        None)]),
])
def test_the_batch_checker_takes_the_records_checkers_rules(schema, records):
    """Each record's status by batch is its status alone: 1 usable, -1 not (a short,
    long or odd-sized raw image included: alone, a size that no dtype divides fails
    the same way instead of raising)."""
    import tensorflow as tf
    from horovod_train.data import decode, writers
    serialized = [writers.image_example(f["image"], label) if "image" in f
                  else writers.tokens_example(f["tokens"], label) for f, label in records]
    alone = [int(decode.checker(schema)(tf.constant(r))) for r in serialized]
    batched = decode.batch_checker(schema)(tf.constant(serialized)).numpy().tolist()
    assert batched == alone and 1 in alone and -1 in alone
    assert decode.batch_checker(schema_lib.Schema("image", (2, 2, 1), "uint8", 3,
                                                  "encoded")) is None
