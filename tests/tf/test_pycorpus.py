"""pycorpus: Python's stdlib sources as a byte-level LM dataset (horovod_train/data/pycorpus.py).

Most tests build from a small fake "stdlib" of random bytes (no window repeats, so a
window identifies where it came from); a few look at the real standard library.
"""
import os
import subprocess
import sys

import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")

from horovod_train import config as cfg  # noqa: E402
from horovod_train import data  # noqa: E402
from horovod_train.data import pycorpus, sharding  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
L = 8


def _write(path, content: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    """Enough files that both splits get some; excluded places hold decoys."""
    root = tmp_path_factory.mktemp("stdlib")
    rng = np.random.default_rng(7)
    names = [f"mod{i}.py" for i in range(150)] + [f"pkg/sub{i}.py" for i in range(50)]
    for name in names:
        _write(os.path.join(root, name), rng.integers(0, 256, rng.integers(50, 400),
                                                      dtype=np.uint8).tobytes())
    for decoy in ("site-packages/x.py", "test/test_x.py", "pkg/tests/t.py",
                  "idlelib/idle_test/t.py", "__pycache__/m.py", "notes.txt", "pkg/data.pyc"):
        _write(os.path.join(root, decoy), b"DECOY" * 50)
    return str(root)


@pytest.fixture(scope="module")
def fake_corpus(fake_root):
    return pycorpus.read_corpus(fake_root)


@pytest.fixture(scope="module")
def built(fake_corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pycorpus"))
    pycorpus.ensure(out, L, fake_corpus)
    return out


def _windows(blob: bytes, seq_len: int) -> np.ndarray:
    tokens = np.frombuffer(blob, np.uint8).astype(np.int32)
    starts = pycorpus.window_starts(len(tokens), seq_len)
    return np.stack([tokens[s:s + seq_len + 1] for s in starts])


def _rows(ds) -> np.ndarray:
    """(x, y) batches -> the (L + 1)-token windows they came from, one row each."""
    rows = [np.concatenate([x.numpy(), y.numpy()[:, -1:]], axis=1) for x, y in ds]
    return np.concatenate(rows) if rows else np.zeros((0, L + 1), np.int32)


def _as_set(rows) -> set:
    return {r.tobytes() for r in np.asarray(rows, np.int32)}


def test_files_are_the_py_sources_outside_excluded_dirs(fake_root, fake_corpus):
    names = pycorpus.list_files(fake_root)
    assert len(names) == 200 and names == sorted(names)
    assert names == sorted(f"mod{i}.py" for i in range(150)) + sorted(
        f"pkg/sub{i}.py" for i in range(50))  # no decoy: excluded dirs, other suffixes
    for split in pycorpus.SPLITS:
        assert all(pycorpus.split_of(n) == split for n in fake_corpus.files[split])
        expected = b"".join(open(os.path.join(fake_root, n), "rb").read()
                            for n in fake_corpus.files[split])
        assert fake_corpus.data[split] == expected
    assert set(fake_corpus.files["train"]) | set(fake_corpus.files["validation"]) == set(names)
    assert fake_corpus.files["validation"]  # the 1% bucket holds a few of 200 names


def test_split_is_by_path_alone():
    # A file keeps its split whatever else is in the corpus (path hash only).
    assert pycorpus.split_of("ast.py") == pycorpus.split_of("ast.py") == "validation"
    assert pycorpus.split_of("typing.py") == "train"


def test_records_are_seq_len_plus_one_windows_of_each_split(built, fake_corpus):
    source = data.load(cfg.DataConfig(dataset="pycorpus", data_dir=built))
    info = pycorpus.read_info(built)
    train = _windows(fake_corpus.data["train"], L)
    valid = _windows(fake_corpus.data["validation"], L)
    assert source.num_train_examples == len(train) == info["splits"]["train"]["sequences"]
    assert source.input_shape == (L,) and source.num_classes == 256
    assert info["splits"]["validation"]["bytes"] == len(fake_corpus.data["validation"])
    assert info["fingerprint"] == fake_corpus.fingerprint and info["seq_len"] == L
    # x = bytes[i:i+L], y = bytes[i+1:i+L+1]: y is x shifted by one byte.
    x, y = next(iter(source.eval_dataset(sharding.ShardInfo(), 4)))
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])
    assert x.dtype == tf.int32 and y.dtype == tf.int32
    # Validation (the default --eval_split=test maps to it): every window once.
    evaluated = _rows(source.eval_dataset(sharding.ShardInfo(), 7))
    assert len(evaluated) == len(valid) and _as_set(evaluated) == _as_set(valid)
    # Train: every window once per epoch (written in a seeded shuffled order).
    one_epoch = _rows(source.train_dataset(sharding.ShardInfo(), 1, seed=0, epoch=0))
    assert _as_set(one_epoch) == _as_set(train) and len(one_epoch) == len(train)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_sharding_contract_for_several_world_sizes(built, fake_corpus, world):
    source = data.load(cfg.DataConfig(dataset="pycorpus", data_dir=built, batch_size=5))
    n, batch = source.num_train_examples, 5
    steps = n // (batch * world)
    seen, evaluated = [], []
    for rank in range(world):
        shard = sharding.ShardInfo(rank, world)
        batches = list(source.train_dataset(shard, batch, seed=3, epoch=1))
        assert len(batches) == steps  # identical on every rank: no rank waits on another
        seen.append(_rows(batches))
        evaluated.append(_rows(source.eval_dataset(shard, 16)))
    train_rows = np.concatenate(seen)
    assert len(_as_set(train_rows)) == len(train_rows) == steps * batch * world  # disjoint
    assert _as_set(train_rows) <= _as_set(_windows(fake_corpus.data["train"], L))
    valid = np.concatenate(evaluated)
    assert len(valid) == len(_as_set(valid))  # each validation window once across ranks
    assert _as_set(valid) == _as_set(_windows(fake_corpus.data["validation"], L))


def test_a_built_directory_is_reused_not_rebuilt(built, monkeypatch):
    before = os.path.getmtime(os.path.join(built, "dataset.json"))
    monkeypatch.setattr(pycorpus, "build", lambda *a, **k: pytest.fail("rebuilt"))
    info = pycorpus.ensure(built, seq_len=999)  # an existing corpus wins, as built
    assert info["seq_len"] == L
    assert os.path.getmtime(os.path.join(built, "dataset.json")) == before


def test_ranks_starting_together_build_once(fake_root, tmp_path):
    """Two processes ensure() the same directory at once: one builds, the other reuses."""
    out, log = tmp_path / "shared", tmp_path / "builds.log"
    script = (
        "import sys\n"
        "from horovod_train.data import pycorpus\n"
        "real = pycorpus.build\n"
        "def logged(*a, **k):\n"
        f"    open({str(log)!r}, 'a').write('build\\n')\n"
        "    return real(*a, **k)\n"
        "pycorpus.build = logged\n"
        f"info = pycorpus.ensure({str(out)!r}, {L}, pycorpus.read_corpus({fake_root!r}))\n"
        "print(info['fingerprint'])\n")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert open(log).read() == "build\n"
    assert outputs[0][0] == outputs[1][0]  # both saw the same corpus


def test_default_location_is_a_cache_keyed_by_length_and_content(fake_corpus, monkeypatch,
                                                                 tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    where = pycorpus.default_dir(64, fake_corpus)
    assert where == os.path.join(str(tmp_path), ".cache", "horovod_train", "pycorpus",
                                 f"L64-{fake_corpus.fingerprint[:12]}")
    other = pycorpus.Corpus(fake_corpus.root, fake_corpus.files,
                            {**fake_corpus.data, "train": fake_corpus.data["train"] + b"#"})
    assert pycorpus.default_dir(64, other) != where


def test_bad_directories_and_lengths_are_usage_errors(tmp_path, fake_corpus, built):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "photo.jpg").write_bytes(b"x")
    with pytest.raises(UsageError, match="empty directory.*Fix"):
        pycorpus.ensure(str(foreign), L, fake_corpus)
    other = tmp_path / "other_tfrecord"
    other.mkdir()
    (other / "dataset.json").write_text(open(os.path.join(built, "dataset.json")).read())
    with pytest.raises(UsageError, match="--dataset=tfrecord"):
        pycorpus.ensure(str(other), L, fake_corpus)
    for bad in (0, -3, True, 2.5):
        with pytest.raises(UsageError, match="--seq_len"):
            pycorpus.build(str(tmp_path / "b"), bad, fake_corpus)
    with pytest.raises(UsageError, match="more than seq_len"):
        pycorpus.build(str(tmp_path / "huge"), 10**6, fake_corpus)
    with pytest.raises(UsageError, match="full Python install"):
        pycorpus.build(str(tmp_path / "none"), L, pycorpus.read_corpus(str(tmp_path / "nowhere")))
    assert pycorpus.main(["--seq_len=0", f"--output_dir={tmp_path / 'cli'}"]) == 2


def test_the_real_standard_library_gives_megabytes_and_a_fixed_split():
    corpus = pycorpus.read_corpus()
    sizes = {split: len(corpus.data[split]) for split in pycorpus.SPLITS}
    assert sizes["train"] > 2_000_000 and 20_000 < sizes["validation"] < 0.05 * sizes["train"]
    names = corpus.files["train"] + corpus.files["validation"]
    assert all(n.endswith(".py") for n in names)
    assert not [n for n in names if set(n.split("/")[:-1]) & pycorpus.EXCLUDED_DIRS]
    assert "os.py" in corpus.files["train"] and "ast.py" in corpus.files["validation"]
    assert pycorpus.read_corpus().fingerprint == corpus.fingerprint  # deterministic


def test_the_case_study_model_takes_the_source_as_the_loop_passes_it(built):
    import keras

    import models
    source = data.load(cfg.DataConfig(dataset="pycorpus", data_dir=built))
    # Exactly the kwargs the loop passes; the sizes come from models/small_lm.py.
    model = models.get_model("decoder_lm_small", input_shape=source.input_shape,
                             num_classes=source.num_classes, gradient_checkpointing=False)
    x, y = next(iter(source.train_dataset(sharding.ShardInfo(), 4, seed=0, epoch=0)))
    logits = model(x)
    assert logits.shape == (4, L, 256) and logits.dtype == "float32"
    loss = float(keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits,
                                                                             from_logits=True)))
    assert abs(loss - np.log(256)) < 0.5  # untrained: close to a uniform guess
    at_64 = models.get_model("decoder_lm_small", input_shape=(64,), num_classes=256)
    assert at_64.count_params() == 437_760  # the figure in docs/lm_case_study.md
