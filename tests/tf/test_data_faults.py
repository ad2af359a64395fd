"""Issue 17, data items: damage is found before step 1, or named in one line after it.

- a truncated LMDB data.mdb is refused before any read (it used to die of SIGBUS);
- an undecodable or wrong-size encoded image fails verification with the file and
  record index, and --skip_corrupt skips and counts it (it used to pass verification
  and crash step 1);
- describe_data_error turns the errors a damaged shard raises inside the pipeline
  into one line (checked on errors raised for real, eagerly and in a tf.function).
"""
import json
import logging
import os
import shutil
import sys

import numpy as np
import pytest

from helpers import child_env, run_cli


tf = pytest.importorskip("tensorflow")
lmdb = pytest.importorskip("lmdb")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import convert, sharding, writers  # noqa: E402
from horovod_train.data.errors import describe_data_error  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

N = 40  # 30 train (one TFRecord file), 10 test
SHAPE = (4, 4, 1)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """PNG-encoded images as TFRecord and LMDB, plus raw ones as LMDB (a bigger data.mdb)."""
    root = tmp_path_factory.mktemp("clean")
    x = (np.arange(N * 16) % 251).astype(np.uint8).reshape(N, *SHAPE)
    np.savez(root / "a.npz", x=x, y=np.arange(N) % 2)
    for fmt in ("tfrecord", "lmdb"):
        convert.convert(convert.ConvertOptions(str(root / "a.npz"), str(root / fmt), fmt,
                                               num_shards=1, eval_fraction=0.25,
                                               encoding="png", progress=False))
    big = np.random.default_rng(0).integers(0, 255, (2000, 16, 16, 1), dtype=np.uint8)
    np.savez(root / "big.npz", x=big, y=np.arange(2000) % 3)
    convert.convert(convert.ConvertOptions(str(root / "big.npz"), str(root / "big"), "lmdb",
                                           progress=False))
    return root


def _load(fmt, path, **kw):
    return data.load(cfg.DataConfig(dataset=fmt, data_dir=str(path), **kw))


def _one_line(message, *fragments):
    assert "\n" not in message and "received" in message and "Fix:" in message, message
    for fragment in fragments:
        assert fragment in message, message


def _error_lines(proc, prefix):
    return [ln for ln in proc.stderr.splitlines() if ln.startswith(prefix)]


# --- item 8: a truncated LMDB ---------------------------------------------------------

def _truncated(clean, tmp_path, size=None):
    path = shutil.copytree(clean / "big", tmp_path / "big")
    mdb = path / "train.lmdb" / "data.mdb"
    os.truncate(mdb, os.path.getsize(mdb) // 2 if size is None else size)
    return path, mdb


@pytest.mark.parametrize("size", [None, 3 * 4096 + 100])
def test_truncated_lmdb_is_refused_at_load_naming_the_file(clean, tmp_path, size):
    path, mdb = _truncated(clean, tmp_path, size)
    with pytest.raises(UsageError) as err:
        _load("lmdb", path, verify_data=False)  # no read at all: only the size check
    _one_line(str(err.value), str(mdb), "bytes", "truncated", "re-convert")


def test_truncated_lmdb_verify_cli_exits_2_with_one_line(clean, tmp_path):
    path, mdb = _truncated(clean, tmp_path)
    proc = run_cli([sys.executable, "-m", "horovod_train.data", "verify",
                    f"--data_dir={path}"], timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = _error_lines(proc, "horovod_train.data: error:")
    assert len(lines) == 1 and str(mdb) in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Fatal Python error" not in proc.stderr


def test_truncated_lmdb_training_exits_2_with_one_line(clean, tmp_path):
    path, mdb = _truncated(clean, tmp_path)
    proc = run_cli([sys.executable, "-m", "horovod_train", "--dataset=lmdb",
                    f"--data_dir={path}", "--noverify_data", "--max_steps=2", "--epochs=1",
                    "--intra_op_threads=1", "--progress=lines"], timeout=300,
                   env=child_env(CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = _error_lines(proc, "horovod_train: error:")
    assert len(lines) == 1 and str(mdb) in lines[0], proc.stderr[-2000:]
    assert "Fatal Python error" not in proc.stderr


# --- item 9: undecodable and wrong-size encoded images -----------------------------------

def _garbage():
    return b"this is not an image, just bytes"


def _png_6x6():
    return tf.io.encode_png(tf.fill([6, 6, 1], tf.constant(7, tf.uint8))).numpy()


def _jpeg_8x8():
    return tf.io.encode_jpeg(tf.fill([8, 8, 1], tf.constant(7, tf.uint8))).numpy()


FAULTS = {"garbage": _garbage, "png_wrong_size": _png_6x6, "jpeg_wrong_size": _jpeg_8x8}
BAD = 5  # the train record index that gets the bad image


def _replace_tfrecord(path, index, image):
    """Rewrites the train file with record `index`'s image replaced (and its size in
    dataset.json updated: this is bad input, not a truncated file)."""
    meta_path = path / "dataset.json"
    meta = json.loads(meta_path.read_text())
    split = meta["splits"]["train"]
    target = path / split["files"][0]
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(target))]
    records[index] = writers.image_example(image, 1)
    with tf.io.TFRecordWriter(str(target)) as w:
        for record in records:
            w.write(record)
    split["sizes"][0] = os.path.getsize(target)
    meta_path.write_text(json.dumps(meta))
    return target


def _replace_lmdb(path, index, image):
    target = path / "train.lmdb"
    env = lmdb.open(str(target), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(writers.lmdb_key(index), writers.image_example(image, 1))
    env.close()
    return target


def _damaged(clean, tmp_path, fmt, fault):
    path = shutil.copytree(clean / fmt, tmp_path / fmt)
    replace = _replace_tfrecord if fmt == "tfrecord" else _replace_lmdb
    return path, replace(path, BAD, FAULTS[fault]())


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_bad_encoded_image_fails_verification_with_file_and_index(clean, tmp_path, fmt, fault):
    path, target = _damaged(clean, tmp_path, fmt, fault)
    with pytest.raises(UsageError) as err:
        _load(fmt, path)
    _one_line(str(err.value), str(target), f"index {BAD}", "--skip_corrupt")


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_skip_corrupt_skips_counts_and_logs_a_bad_image(clean, tmp_path, fmt, fault, caplog):
    path, target = _damaged(clean, tmp_path, fmt, fault)
    with caplog.at_level(logging.WARNING):
        source = _load(fmt, path, skip_corrupt=True)
    assert source.skipped == 1 and source.num_train_examples == 29
    assert any("--skip_corrupt" in r.getMessage() and str(target) in r.getMessage()
               for r in caplog.records)
    for world in (1, 2):
        for rank in range(world):
            batches = list(source.train_dataset(sharding.ShardInfo(rank, world), 2, 0, 0))
            assert len(batches) == 29 // (2 * world)
            assert all(tuple(x.shape[1:]) == SHAPE for x, _ in batches)


def test_verify_cli_reports_a_bad_image_instead_of_ok(clean, tmp_path):
    path, target = _damaged(clean, tmp_path, "tfrecord", "garbage")
    proc = run_cli([sys.executable, "-m", "horovod_train.data", "verify",
                    f"--data_dir={path}"], timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    lines = _error_lines(proc, "horovod_train.data: error:")
    assert len(lines) == 1 and str(target) in lines[0] and f"index {BAD}" in lines[0]
    assert "Traceback" not in proc.stderr


# --- item 14: convert --output_dir=<a regular file> ----------------------------------

@pytest.mark.parametrize("below", [False, True])
def test_convert_output_dir_that_is_a_file_is_one_line_exit_2(clean, tmp_path, capsys, below):
    from horovod_train.data.__main__ import main
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = blocker / "sub" if below else blocker
    code = main(["convert", f"--input={clean / 'a.npz'}", f"--output_dir={out}",
                 "--no_progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(blocker) in err and "Fix:" in err, err
    assert blocker.read_text() == "not a directory"


# --- item 5: describe_data_error on errors raised by a damaged pipeline ------------------

def _flipped_tfrecord(clean, tmp_path):
    path = shutil.copytree(clean / "tfrecord", tmp_path / "flip")
    meta = json.loads((path / "dataset.json").read_text())
    target = path / meta["splits"]["train"]["files"][0]
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    target.write_bytes(bytes(raw))
    return path, target


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as err:  # noqa: BLE001 - the error is the result here
        return err
    raise AssertionError("expected the pipeline to fail")


def _drain_eager(ds):
    for _ in ds:
        pass


def _drain_in_function(ds):
    """As the loop does: the batch is fetched inside a compiled step."""
    it = iter(ds)
    step = tf.function(lambda it: tf.reduce_sum(tf.cast(next(it)[0], tf.float32)))
    for _ in range(1000):
        step(it)


def _train(fmt, path):
    return _load(fmt, path, verify_data=False).train_dataset(sharding.ShardInfo(0, 1), 2, 0, 0)


def _line(err, *fragments, data_dir=None):
    line = describe_data_error(err, data_dir=data_dir) if data_dir else describe_data_error(err)
    assert line is not None, f"{type(err).__name__}: {err}"
    assert line.startswith("data: ") and "\n" not in line and len(line) < 600, line
    _one_line(line, "damaged", "verify", "--skip_corrupt", *fragments)
    return line


@pytest.mark.parametrize("drain", [_drain_eager, _drain_in_function])
def test_describe_a_flipped_byte_in_a_tfrecord_shard(clean, tmp_path, drain):
    path, _ = _flipped_tfrecord(clean, tmp_path)
    err = _raised(lambda: drain(_train("tfrecord", path)))
    assert type(err).__name__ == "DataLossError"
    _line(err, "corrupted record", f"--data_dir={path}", data_dir=str(path))


def test_describe_a_truncated_tfrecord_file(clean, tmp_path):
    path = shutil.copytree(clean / "tfrecord", tmp_path / "trunc")
    target = path / json.loads((path / "dataset.json").read_text())["splits"]["train"]["files"][0]
    os.truncate(target, os.path.getsize(target) - 5)  # inside the last record's checksum
    err = _raised(lambda: _drain_eager(tf.data.TFRecordDataset(str(target))))
    _line(err, "truncated record")


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
@pytest.mark.parametrize("fault,words", [("garbage", "Unknown image file format"),
                                         ("png_wrong_size", "not compatible with expected")])
def test_describe_a_bad_image_met_under_noverify_data(clean, tmp_path, fmt, fault, words):
    path, _ = _damaged(clean, tmp_path, fmt, fault)
    err = _raised(lambda: _drain_in_function(_train(fmt, path)))
    line = _line(err, words)
    assert "Error in user-defined function" not in line and "{{" not in line


def test_describe_a_damaged_lmdb_page_names_the_environment(clean, tmp_path):
    path = shutil.copytree(clean / "big", tmp_path / "big")
    mdb = path / "train.lmdb" / "data.mdb"
    with open(mdb, "r+b") as f:  # leaf pages, well past the two meta pages
        f.seek(20 * 4096)
        f.write(b"\xff" * (20 * 4096))
    err = _raised(lambda: _drain_eager(_train("lmdb", path)))
    _line(err, str(path / "train.lmdb"))


def test_errors_not_from_damaged_data_are_left_alone():
    matmul = _raised(lambda: tf.matmul(tf.ones([2, 3]), tf.ones([2, 3])))
    assert describe_data_error(matmul) is None
    assert describe_data_error(tf.errors.ResourceExhaustedError(None, None, "OOM")) is None
    assert describe_data_error(ValueError("bad learning rate")) is None
    assert describe_data_error(KeyboardInterrupt()) is None


def test_a_wrapped_data_error_is_still_recognised(clean, tmp_path):
    path, _ = _flipped_tfrecord(clean, tmp_path)
    inner = _raised(lambda: _drain_eager(_train("tfrecord", path)))
    try:
        raise RuntimeError("step failed") from inner
    except RuntimeError as outer:
        _line(outer, "corrupted record")
