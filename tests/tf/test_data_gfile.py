"""Issue 41 item 5: data on any TensorFlow filesystem, proven on TensorFlow's ram://
(it lives inside one process, so convert, verify, load, train and evaluate all run in
this one): inputs read from it, datasets written to it, the verification memory kept
beside the data there, damage refused, a run trained and evaluated from it (its --cache
there too), and LMDB refused for it. The TF-free half: tests/unit/test_data_fs.py."""
import io
import json
import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import loop  # noqa: E402
from horovod_train import fs  # noqa: E402
from horovod_train.data import sources, tfrecord, verdicts  # noqa: E402
from horovod_train.data.__main__ import main as data_cli  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402


def _put(path: str, data: bytes):
    """Writes a file as a user's copy would. ram:// lists only directories made
    explicitly, and its "wb" appends to an existing file, so both are done by hand."""
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


def _put_npz(path: str, **arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    _put(path, buf.getvalue())


def _convert(capsys, *flags) -> str:
    assert data_cli(["convert", "--no_progress", *flags]) == 0
    return capsys.readouterr().out


def _scans(monkeypatch) -> list:
    """The files each verification pass scans (the real scan, counted)."""
    scanned, real = [], tfrecord.verify.scan_files
    monkeypatch.setattr(tfrecord.verify, "scan_files",
                        lambda paths, *a: scanned.extend(paths) or real(paths, *a))
    return scanned


def _load(data_dir, **kwargs):
    return tfrecord.load(cfg.DataConfig(dataset="tfrecord", data_dir=data_dir, **kwargs))


def test_npz_on_ram_converts_verifies_is_remembered_there_and_damage_is_refused(
        ram, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    _put_npz(f"{ram}/in/d.npz", x_train=rng.random((40, 4, 4, 1), np.float32),
             y_train=rng.integers(0, 3, 40), x_test=rng.random((12, 4, 4, 1), np.float32),
             y_test=rng.integers(0, 3, 12))
    out = f"{ram}/tfr"
    said = _convert(capsys, f"--input={ram}/in/d.npz", f"--output_dir={out}", "--num_shards=4")
    assert said.startswith(f"wrote {out}: tfrecord, image (4, 4, 1), 3 classes; train 40 records")
    meta = json.loads(fs.read_text(f"{out}/dataset.json"))
    assert meta["splits"]["train"]["records"] == [10] * 4
    assert not [n for n in tf.io.gfile.listdir(out) if n.endswith(".partial")]

    scanned = _scans(monkeypatch)
    first = _load(out)
    assert first.num_train_examples == 40 and len(scanned) == 8  # 4 train + 4 test files
    memory = json.loads(fs.read_text(f"{out}/{verdicts.MEMORY_FILE}"))  # beside the data
    assert len(memory["files"]) == 8
    scanned.clear()
    assert _load(out).train.counts == first.train.counts and scanned == []  # all remembered

    assert data_cli(["verify", f"--data_dir={out}"]) == 0  # the CLI reads every record again
    assert capsys.readouterr().out.startswith(f"ok {out}: 40 training examples, input (4, 4, 1)")
    assert len(scanned) == 8

    target = first.train.paths[1]
    raw = bytearray(tf.io.gfile.GFile(target, "rb").read())
    raw[20:24] = b"\xff\xff\xff\xff"  # a record's payload, same size: ram:// keeps no mtime
    _put(target, bytes(raw))
    for _ in range(2):  # scanned, then remembered: the same refusal
        with pytest.raises(UsageError, match=rf"^TFRecord file {target}: received 'an "
                           r"unreadable record at index 0"):
            _load(out)
    assert data_cli(["verify", f"--data_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"horovod_train.data: error: TFRecord file "
                                                   f"{target}: received"), err


def _png(value: int) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(np.full((6, 5), value, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_image_folders_and_text_on_ram_convert_and_verify(ram, capsys):
    for label, name in enumerate(("cat", "dog")):
        for i in range(5):
            _put(f"{ram}/photos/{name}/{i}.png", _png(40 * label + i))
    said = _convert(capsys, f"--input={ram}/photos", f"--output_dir={ram}/img", "--channels=1",
                    "--eval_fraction=0.2", "--num_shards=2")
    assert said.startswith(f"wrote {ram}/img: tfrecord, image (6, 5, 1), 2 classes; train 8")
    assert fs.read_text(f"{ram}/img/labels.txt") == "cat\ndog\n"
    assert data_cli(["verify", f"--data_dir={ram}/img"]) == 0
    assert capsys.readouterr().out.startswith(f"ok {ram}/img: 8 training examples")

    _put(f"{ram}/text/a.txt", b"hello, filesystem " * 30)
    _convert(capsys, f"--input={ram}/text", f"--output_dir={ram}/lm", "--seq_len=16")
    lm = _load(f"{ram}/lm")
    assert lm.input_shape == (16,) and lm.num_train_examples > 0


def test_a_run_trains_and_evaluates_from_ram(ram, tmp_path, capsys):
    digits = sources.load_digits(None)
    _put_npz(f"{ram}/digits.npz", x_train=digits.x_train, y_train=digits.y_train,
             x_test=digits.x_test, y_test=digits.y_test)
    data_dir = f"{ram}/digits"
    _convert(capsys, f"--input={ram}/digits.npz", f"--output_dir={data_dir}", "--num_shards=4")
    tf.io.gfile.makedirs(f"{ram}/cache")
    config = cfg.RunConfig(
        data=cfg.DataConfig(dataset="tfrecord", data_dir=data_dir, cache=f"{ram}/cache/c"),
        train=cfg.TrainConfig(epochs=1, max_steps=12, log_every=4, eval_every_epochs=0),
        observe=cfg.ObserveConfig(run_dir=str(tmp_path / "run"), baseline_cache=""),
        runtime=cfg.RuntimeConfig(backend="local"))
    summary = loop.run(config)
    assert summary["steps"] == 12
    assert all(math.isfinite(summary[k]) for k in ("final_loss", "test_loss", "test_accuracy"))
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    records = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    evals = [r for r in records if r.get("kind") == "eval"]
    assert evals and all(r["count"] == len(digits.x_test) for r in evals)  # the eval split, once
    assert any(n.startswith("c.tfrecord-train-") for n in tf.io.gfile.listdir(f"{ram}/cache"))


def test_lmdb_on_ram_is_refused_at_convert_and_at_load_in_one_line(ram, capsys):
    _put_npz(f"{ram}/d.npz", x=np.zeros((8, 2, 2, 1), np.float32), y=np.zeros(8, np.int64))
    assert data_cli(["convert", f"--input={ram}/d.npz", f"--output_dir={ram}/lmdb",
                     "--format=lmdb", "--no_progress"]) == 2
    expected = ("horovod_train.data: error: {flag}: received '{path}'; expected a local "
                "directory (LMDB needs a local memory map). Fix: keep LMDB on local disk (copy "
                "a remote one down, e.g. `gsutil -m cp -r`) and pass that path, or convert "
                "with --format=tfrecord\n")
    assert capsys.readouterr().err == expected.format(flag="--output_dir", path=f"{ram}/lmdb")
    assert not tf.io.gfile.exists(f"{ram}/lmdb")  # refused before anything was written

    # An LMDB directory copied up as is: the verify command refuses it, as the trainer does.
    _put(f"{ram}/up/dataset.json", json.dumps({
        "format": "lmdb", "kind": "image", "shape": [2, 2, 1], "dtype": "float32",
        "num_classes": 1, "splits": {"train": {"files": ["train.lmdb"]}}}).encode())
    assert data_cli(["verify", f"--data_dir={ram}/up"]) == 2
    assert capsys.readouterr().err == expected.format(flag="--data_dir", path=f"{ram}/up")
    with pytest.raises(UsageError) as err:
        cfg.DataConfig(dataset="lmdb", data_dir=f"{ram}/up")
    assert f"horovod_train.data: error: {err.value}\n" == expected.format(
        flag="--data_dir", path=f"{ram}/up")


def test_a_scheme_no_filesystem_serves_is_one_line_naming_it(capsys):
    with pytest.raises(UsageError, match=r"^--data_dir: received \"nofs://b/d \(nofs://b/d: File "
                       r"system scheme 'nofs' not implemented.*\)\"; expected a directory this "
                       r"process can read\. Fix: fix the path, or the credentials"):
        _load("nofs://b/d")
    assert data_cli(["convert", "--input=nofs://b/d.npz", "--output_dir=nofs://b/out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input: received \"nofs://b/d.npz (nofs://b/d.npz: File " \
        "system scheme 'nofs' not implemented" in err, err
