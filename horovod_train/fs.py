"""The one place where paths touch a filesystem: data, and checkpoints. TF-free at import.

A path is a local path (`/data/x`, `data/x`, `file:///data/x`) or a URL of a
filesystem TensorFlow has registered. TensorFlow 2.21 registers `gs://` and `ram://`
(and `file://`), and nothing else: `s3://`, `hdfs://` and `az://` are not served (they
were tensorflow-io's, whose last release, 0.37.1, predates TensorFlow 2.21; this project
neither installs nor tests it). A path with such a scheme is refused in one line naming
it and TensorFlow's reason ("File system scheme 's3' not implemented"). For a scheme
TensorFlow lacks, _gfile still imports `tensorflow_io` if one is installed, so a build
that does load with this TensorFlow would register its filesystems.

A URL may hold credentials (`s3://KEY:SECRET@bucket/x`): they are used as given here,
and masked wherever a path is shown (launch/redact.py; the sinks are the error types,
the log filter, the JSON writers and the trainer's last line).

The rule, in one function (`_gfile`): a URL goes through tf.io.gfile, the layer that
TensorFlow's own readers and writers (TFRecordDataset, TFRecordWriter, tf.data's file
cache) use, so what this module checked is what the trainer reads; a local path goes
through os. Not tf.io.gfile for every path, because
  - the converter's bad-input errors, the data CLI's argument checks and DataConfig's
    validation then come back without importing TensorFlow (config.py is TF-free);
  - os.replace is an atomic rename, and a local error keeps its errno and strerror
    for the one-line messages;
  - LMDB memory-maps its file, which needs a local path anyway.
TensorFlow is imported on the first URL, never at import.

Errors: every call raises OSError (FileNotFoundError for a missing path), whichever
side served it, so callers handle one kind; a URL's OSError carries TensorFlow's message.

Renaming (`renames_atomically`, the rule in one place): a local disk renames a directory
in one step (POSIX rename), and so would HDFS; on object stores (gs://, s3://) a
"rename" copies object by object, TensorFlow's ram:// renames a directory without its
files, and a filesystem this module does not know is treated the same: not atomic.
Checkpoints (checkpoint_commit.py) commit by rename only where it is atomic. For tests
only, the environment variable HOROVOD_TRAIN_TEST_NO_ATOMIC_RENAME=1 makes local paths
count as not atomic too, so that the object-store path can be killed mid-write in a real
child process (ram:// dies with its process); whoever reads such a directory must set it
too.
"""
import contextlib
import dataclasses
import errno
import os
import re
import shutil
import tempfile
import uuid
import zlib

from horovod_train import filemode

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
LOCAL_SCHEMES = ("", "file")
ATOMIC_RENAME_SCHEMES = LOCAL_SCHEMES + ("hdfs",)
NO_ATOMIC_RENAME_ENV = "HOROVOD_TRAIN_TEST_NO_ATOMIC_RENAME"  # tests only: see above
CHUNK = 1 << 20  # bytes per read when checksumming
ACCESS_FIX = "fix the path, or the credentials and access of its filesystem"


@dataclasses.dataclass(frozen=True)
class Stat:
    size: int  # bytes
    mtime_ns: int  # 0 when the filesystem keeps no modification time (TF's ram://)


@dataclasses.dataclass(frozen=True)
class Written:
    size: int  # bytes
    crc32: int


def scheme(path: str) -> str:
    """`gs` for gs://bucket/x; "" for a plain path."""
    found = _SCHEME.match(str(path))
    return found.group(1).lower() if found else ""


def is_local(path: str) -> bool:
    """A path on this machine's own filesystem: no scheme, or file://."""
    return scheme(path) in LOCAL_SCHEMES


def local_path(path: str) -> str:
    """The plain path of a local one (file:///x -> /x); URLs are returned as given."""
    return path[len("file://"):] if scheme(path) == "file" else path


def absolute(path: str) -> str:
    """An absolute local path, or the URL as given (a URL has no working directory)."""
    return os.path.abspath(local_path(path)) if is_local(path) else path


def renames_atomically(path: str) -> bool:
    """Whether renaming a directory at `path` is one atomic step (see the module's doc)."""
    if is_local(path) and os.environ.get(NO_ATOMIC_RENAME_ENV, "0") not in ("", "0"):
        return False
    return scheme(path) in ATOMIC_RENAME_SCHEMES


def _gfile(path: str):
    """tf.io.gfile for a URL, None for a local path: the rule of this module."""
    if is_local(path):
        return None
    import tensorflow as tf
    if scheme(path) not in tf.io.gfile.get_registered_schemes():
        # s3://, hdfs://, az:// were tensorflow-io's, registered when it is imported;
        # none is installed with TensorFlow 2.21 (the module's doc).
        with contextlib.suppress(ImportError):
            import tensorflow_io  # noqa: F401
    return tf.io.gfile


@contextlib.contextmanager
def _as_oserror(path: str):
    """TensorFlow's filesystem errors as OSError (NotFound as FileNotFoundError)."""
    import tensorflow as tf
    try:
        yield
    except tf.errors.NotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, err.message or os.strerror(errno.ENOENT),
                                path) from None
    except tf.errors.OpError as err:
        raise OSError(f"{path}: {err.message}") from None


def _call(path: str, local, remote, *args, **kwargs):
    gfile = _gfile(path)
    if gfile is None:
        return local(local_path(path), *args, **kwargs)
    with _as_oserror(path):
        return getattr(gfile, remote)(path, *args, **kwargs)


def exists(path: str) -> bool:
    return _call(path, os.path.exists, "exists")


def isdir(path: str) -> bool:
    gfile = _gfile(path)
    if gfile is None:
        return os.path.isdir(local_path(path))
    with _as_oserror(path):
        if gfile.isdir(path):
            return True
        gfile.exists(path)  # raises what isdir answers False for: no such scheme, no access
        return False


def isfile(path: str) -> bool:
    gfile = _gfile(path)
    if gfile is None:
        return os.path.isfile(local_path(path))
    try:
        with _as_oserror(path):
            return not gfile.stat(path).is_directory
    except FileNotFoundError:
        return False


def listdir(path: str) -> list[str]:
    """Entry names, without gfile's trailing '/' on sub-directories."""
    return [name.rstrip("/") for name in _call(path, os.listdir, "listdir")]


def walk(path: str):
    """(folder, sub-folder names, file names) per folder, top-down, as os.walk."""
    gfile = _gfile(path)
    if gfile is None:
        yield from os.walk(local_path(path))
        return
    with _as_oserror(path):
        for folder, dirs, files in gfile.walk(path):
            yield folder, [d.rstrip("/") for d in dirs], files


def stat(path: str) -> Stat:
    gfile = _gfile(path)
    if gfile is None:
        st = os.stat(local_path(path))
        return Stat(st.st_size, st.st_mtime_ns)
    with _as_oserror(path):
        st = gfile.stat(path)
    return Stat(st.length, st.mtime_nsec)


def crc32(path: str) -> int:
    """The file's CRC-32: one sequential read (a stamp where no mtime is kept)."""
    value = 0
    with open_file(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            value = zlib.crc32(chunk, value)
    return value


def open_file(path: str, mode: str = "rb"):
    """A file object (text modes are UTF-8); a URL's opens lazily, so its errors may
    come at the first read: use read_bytes / read_text where a whole file is wanted."""
    gfile = _gfile(path)
    if gfile is None:
        return open(local_path(path), mode, encoding=None if "b" in mode else "utf-8")
    return gfile.GFile(path, mode)


def read_bytes(path: str) -> bytes:
    gfile = _gfile(path)
    if gfile is None:
        with open(local_path(path), "rb") as f:
            return f.read()
    with _as_oserror(path), gfile.GFile(path, "rb") as f:
        return f.read()


@contextlib.contextmanager
def reading(path: str):
    """The file open for binary reads (seekable: np.load and zipfile need it); a URL's
    filesystem errors, at the open or at any read inside the block, come out as OSError."""
    gfile = _gfile(path)
    if gfile is None:
        with open(local_path(path), "rb") as f:
            yield f
        return
    with _as_oserror(path), gfile.GFile(path, "rb") as f:
        yield f


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def makedirs(path: str) -> None:
    """Creates the directory and its parents; an existing directory is fine."""
    _call(path, lambda p: os.makedirs(p, exist_ok=True), "makedirs")


def remove(path: str) -> None:
    _call(path, os.remove, "remove")


def rmtree(path: str) -> None:
    _call(path, shutil.rmtree, "rmtree")


def rename(src: str, dst: str) -> None:
    """Renames a file or directory; `dst` must not exist. Atomic only where
    renames_atomically(dst) says so."""
    gfile = _gfile(dst)
    if gfile is None:
        os.rename(local_path(src), local_path(dst))
        return
    with _as_oserror(src):
        gfile.rename(src, dst, overwrite=False)


def write_stream(path: str, write) -> Written:
    """Creates the file at `path` (replacing one there) with what `write(stream)` writes
    into the stream it is given; returns the size and CRC-32 of what it wrote. A local
    file is on disk (fsync) when this returns. A failure raises OSError and may leave
    part of the file: where that must never be taken for the whole one, the caller
    writes where it does not count yet (checkpoint_commit.py)."""
    gfile = _gfile(path)
    if gfile is None:
        with open(local_path(path), "wb") as f:
            counted = _Counted(f)
            write(counted)
            f.flush()
            os.fsync(f.fileno())
        return Written(counted.size, counted.crc32)
    with _as_oserror(path):
        if gfile.exists(path):
            gfile.remove(path)  # ram:// appends to an existing file instead of replacing it
        with gfile.GFile(path, "wb") as f:
            f.write(b"")  # a GFile creates its file at the first write: so an empty one too
            counted = _Counted(f)
            write(counted)
    return Written(counted.size, counted.crc32)


class _Counted:
    """A write-only stream over a file, counting the bytes and their CRC-32 on the way.
    It cannot seek, on purpose: zipfile then streams (a data descriptor after each
    member) instead of seeking back to patch a header, which a URL's file cannot do
    (TF's ram:// cannot even tell its position)."""

    def __init__(self, f):
        self._f, self.size, self.crc32 = f, 0, 0

    def write(self, data) -> int:
        self._f.write(data)
        size = memoryview(data).nbytes  # zipfile may pass a memoryview of an array
        self.size, self.crc32 = self.size + size, zlib.crc32(data, self.crc32)
        return size

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()


def write_atomic(path: str, data: bytes) -> None:
    """Writes aside in the same directory, then renames over `path`, so a reader never
    takes half a file for the whole one: os.replace is atomic on a local disk; a URL
    goes through the filesystem's rename (atomic on HDFS; object stores such as GCS
    and S3 show an object only once it is whole). The partial file is removed when
    anything fails; the error is raised as OSError."""
    gfile = _gfile(path)
    if gfile is None:
        _write_local(local_path(path), data)
        return
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.partial"
    try:
        with _as_oserror(path):
            with gfile.GFile(tmp, "wb") as f:
                f.write(data)
            gfile.rename(tmp, path, overwrite=True)
    except OSError:
        with contextlib.suppress(Exception):
            gfile.remove(tmp)
        raise


def _write_local(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".partial")
    try:
        os.fchmod(fd, filemode.new_file_mode())  # mkstemp's 0600 would outlive the rename
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
