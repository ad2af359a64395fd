"""Issue 41 item 5, the TF-free half: fs.py's local side and its rule (a URL goes
to tf.io.gfile, a local path to os), the local-only sources refused for a URL before
TensorFlow loads, and the verification memory keyed by a URL as given. The URL side on
TensorFlow's ram:// filesystem: tests/tf/test_data_gfile.py."""
import os
import stat
import subprocess
import sys

import pytest

from helpers import ROOT
from horovod_train import config as cfg
from horovod_train import fs
from horovod_train.data import convert, verdicts
from horovod_train.errors import UsageError


@pytest.mark.parametrize("path, scheme, local", [
    ("/data/x", "", True), ("data/x", "", True), ("file:///data/x", "file", True),
    ("gs://bucket/x", "gs", False), ("hdfs://nn:8020/x", "hdfs", False),
    ("s3://b/x", "s3", False), ("ram://x", "ram", False), ("GS://b", "gs", False),
    ("weird:name/x", "", True), ("./gs://x", "", True)])
def test_the_scheme_decides_local_or_url(path, scheme, local):
    assert fs.scheme(path) == scheme
    assert fs.is_local(path) is local


def test_local_paths_drop_file_scheme_and_urls_stay_as_given(tmp_path, monkeypatch):
    assert fs.local_path("file:///data/x") == "/data/x"
    assert fs.local_path("gs://b/x") == "gs://b/x"
    assert fs.absolute("gs://b/x/../y") == "gs://b/x/../y"  # no working directory on a URL
    monkeypatch.chdir(tmp_path)
    assert fs.absolute("sub") == str(tmp_path / "sub")
    assert fs.absolute("file:///a/../b") == "/b"


def test_the_local_side_answers_as_os_does(tmp_path):
    base = f"file://{tmp_path}"
    fs.makedirs(f"{base}/a/b")
    fs.makedirs(f"{base}/a/b")  # already there: fine
    fs.write_atomic(f"{base}/a/x.json", b"{}")
    assert fs.isdir(f"{base}/a") and fs.isfile(str(tmp_path / "a" / "x.json"))
    assert not fs.isfile(f"{base}/a/b") and not fs.exists(f"{base}/none")
    assert sorted(fs.listdir(f"{base}/a")) == ["b", "x.json"]
    assert [(os.path.basename(d), sorted(s), f) for d, s, f in fs.walk(f"{base}/a")] == \
        [("a", ["b"], ["x.json"]), ("b", [], [])]
    st = fs.stat(f"{base}/a/x.json")
    assert st.size == 2 and st.mtime_ns == os.stat(tmp_path / "a" / "x.json").st_mtime_ns
    assert fs.read_text(f"{base}/a/x.json") == "{}"
    fs.remove(f"{base}/a/x.json")
    fs.rmtree(f"{base}/a")
    assert os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        fs.stat(f"{base}/a")


def test_an_atomic_write_replaces_whole_leaves_nothing_aside_and_takes_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = str(tmp_path / "dataset.json")
        fs.write_atomic(path, b"first")
        fs.write_atomic(path, b"second")
        assert open(path, "rb").read() == b"second" and os.listdir(tmp_path) == ["dataset.json"]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640  # not mkstemp's 0600
        os.mkdir(tmp_path / "blocked")  # a directory in the file's place: refused
        with pytest.raises(OSError):
            fs.write_atomic(str(tmp_path / "blocked"), b"x")
        assert sorted(os.listdir(tmp_path)) == ["blocked", "dataset.json"]  # no partial file
    finally:
        os.umask(old)


@pytest.mark.parametrize("path, atomic", [
    ("/ck", True), ("file:///ck", True), ("hdfs://nn/ck", True), ("gs://b/ck", False),
    ("s3://b/ck", False), ("ram://ck", False), ("az://c/ck", False)])
def test_which_filesystems_rename_atomically_and_the_test_switch(path, atomic, monkeypatch):
    assert fs.renames_atomically(path) is atomic
    monkeypatch.setenv(fs.NO_ATOMIC_RENAME_ENV, "1")  # local paths only
    assert fs.renames_atomically(path) is (atomic and not fs.is_local(path))
    monkeypatch.setenv(fs.NO_ATOMIC_RENAME_ENV, "0")
    assert fs.renames_atomically(path) is atomic


def test_a_stream_write_counts_size_and_crc_replaces_and_takes_the_umask(tmp_path):
    import zlib
    old = os.umask(0o027)
    try:
        path = str(tmp_path / "f.bin")
        fs.write_stream(path, lambda f: f.write(b"a longer first version"))
        written = fs.write_stream(path, lambda f: [f.write(b"ab"), f.write(memoryview(b"cd"))])
        assert written == fs.Written(4, zlib.crc32(b"abcd")) and fs.read_bytes(path) == b"abcd"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    finally:
        os.umask(old)
    fs.rename(path, str(tmp_path / "g.bin"))
    assert os.listdir(tmp_path) == ["g.bin"]
    with fs.reading(str(tmp_path / "g.bin")) as f:
        assert f.seekable() and f.read() == b"abcd"


def test_the_verification_memory_of_a_url_is_keyed_by_the_url_as_given(tmp_path, monkeypatch):
    beside, cached = verdicts.Memory("gs://bucket/data", "k", str(tmp_path))._places()
    assert beside == f"gs://bucket/data/{verdicts.MEMORY_FILE}"
    digest = verdicts.hashlib.sha256(b"gs://bucket/data").hexdigest()[:16]
    assert cached == os.path.join(str(tmp_path), f"{digest}.json")
    monkeypatch.chdir(tmp_path)
    assert verdicts.Memory("d", "k")._places()[0] == str(tmp_path / "d" / verdicts.MEMORY_FILE)


LMDB_LINE = ("--data_dir: received 'ram://data'; expected a local directory (LMDB needs a "
             "local memory map). Fix: keep LMDB on local disk (copy a remote one down, e.g. "
             "`gsutil -m cp -r`) and pass that path, or convert with --format=tfrecord")


def test_lmdb_on_a_url_is_refused_at_load_and_at_convert_with_the_fix():
    with pytest.raises(UsageError) as err:
        cfg.DataConfig(dataset="lmdb", data_dir="ram://data")
    assert str(err.value) == LMDB_LINE
    with pytest.raises(UsageError) as err:
        convert.ConvertOptions("x.npz", "gs://bucket/out", format="lmdb")
    assert str(err.value) == LMDB_LINE.replace("--data_dir", "--output_dir").replace(
        "'ram://data'", "'gs://bucket/out'")
    convert.ConvertOptions("x.npz", "file:///tmp/out", format="lmdb")  # file:// is local


def test_pycorpus_on_a_url_is_refused_with_the_way_to_read_one_there():
    with pytest.raises(UsageError, match=r"^--data_dir: received 'gs://b/c'; expected a local "
                       r"directory \(pycorpus builds .*--dataset=tfrecord$"):
        cfg.DataConfig(dataset="pycorpus", data_dir="gs://b/c")


def test_a_url_data_dir_and_cache_are_left_to_their_filesystem_without_loading_tf():
    """Validation is TF-free: a URL is checked where the data loads (a fresh process,
    as other tests of this session may have loaded TensorFlow)."""
    code = ("import sys; from horovod_train import config as cfg; "
            "cfg.DataConfig(dataset='tfrecord', data_dir='gs://no-bucket/d', "
            "cache='gs://no-bucket/cache/c'); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"
    with pytest.raises(UsageError, match="--data_dir: received '/no/such'; expected an existing"):
        cfg.DataConfig(dataset="tfrecord", data_dir="/no/such")
    with pytest.raises(UsageError, match="--cache"):
        cfg.DataConfig(cache="file:///no/such/c")
