"""Files only this user can read or write, in a directory only this user can enter.
Standard library only, like all of launch/.

A run dir may sit on storage that other local users can write: a shared scratch or a
group-writable project space. There, a name this process opens may be a symlink another
user planted, pointing at a file this user can write (a shell profile), and open(path,
"w") writes through it. So a directory is opened once and checked (a real directory,
this user's), made 0700, and every file in it is then reached through that open
directory (its fd: renaming the directory away afterwards changes nothing):
- a file is written whole by creating a temporary name with O_CREAT | O_EXCL |
  O_NOFOLLOW, mode 0600 (an existing file or link at that name is never opened), and
  renaming it over the final name (a link there is replaced, not followed);
- a file is read only when O_NOFOLLOW opens it and fstat says it is a regular file of
  this user's.
"""
import contextlib
import dataclasses
import errno
import os
import pwd
import stat
import threading

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A path that is not ours to write: str() is one line, received, expected, the fix."""


def owner(uid: int) -> str:
    """'uid 65534 (nobody)': a user as a line names it."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def describe(found: os.stat_result) -> str:
    """What is at a path, as a refusal names it: 'a symlink', 'a file owned by uid 1001 (ann)'."""
    if stat.S_ISLNK(found.st_mode):
        return "a symlink"
    kind = "a directory" if stat.S_ISDIR(found.st_mode) else \
        "a file" if stat.S_ISREG(found.st_mode) else "a special file"
    return f"{kind} owned by {owner(found.st_uid)}" if found.st_uid != os.geteuid() else kind


def is_ours(found: os.stat_result, kind=stat.S_ISREG) -> bool:
    """Whether `found` (an lstat or fstat) is of `kind` and this user's: never a link."""
    return kind(found.st_mode) and found.st_uid == os.geteuid()


def _refused(path: str, found: str) -> Refused:
    return Refused(f"{path!r}: received {found}; expected a directory owned by you "
                   f"({owner(os.geteuid())}), not a symlink. Fix: remove it (rm -r {path}), "
                   f"or pass a --run_dir that only you can write")


@dataclasses.dataclass(frozen=True)
class PrivateDir:
    """An open directory of this user's, mode 0700; the files in it (see the module)."""
    path: str
    fd: int

    @classmethod
    def open(cls, path: str, create: bool = True) -> "PrivateDir":
        """Opens `path` (with create, makes it and its parents first); raises Refused when
        it is a symlink, not a directory, another user's, or cannot be made or opened.
        A directory of ours that others can write (an older version's, a umask of 0) is
        taken back: 0700."""
        try:
            if create:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, PRIVATE_DIR_MODE)
            before = os.lstat(path)
            if not is_ours(before, stat.S_ISDIR):
                raise _refused(path, describe(before))
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        except OSError as err:
            raise _refused(path, err.strerror or str(err)) from None
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            os.close(fd)  # swapped between the check and the open: someone is at work
            raise _refused(path, "a directory that was replaced while it was opened")
        if stat.S_IMODE(opened.st_mode) != PRIVATE_DIR_MODE:
            try:
                os.fchmod(fd, PRIVATE_DIR_MODE)
            except OSError as err:  # a read-only mount: refused, and the fd not left open
                os.close(fd)
                raise _refused(path, err.strerror or str(err)) from None
        return cls(path, fd)

    def names(self) -> list[str]:
        """The names in this directory, the one opened (not whatever its path is now)."""
        return os.listdir(self.fd)

    def read(self, name: str) -> str | None:
        """The text of `name` in this directory when it is a regular file of this
        user's; None when it is missing, a link, a FIFO (O_NONBLOCK: opening one never
        waits) or another user's."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=self.fd)
        except OSError:
            return None
        return _read_own(fd)

    def entry(self, name: str) -> os.stat_result | None:
        """What is at `name` (a link is the link), or None."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def remove(self, name: str) -> None:
        """Removes `name` (a link: the link, never its target), if it is there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def write_new(self, name: str, data: bytes) -> int:
        """Replaces `name` with a new 0600 file holding `data`; returns it open for
        reading and appending (O_APPEND)."""
        tmp = f"{name}.{os.getpid()}.{threading.get_native_id()}.tmp"
        self.remove(tmp)  # a leftover of ours, or a link planted while the dir was open
        fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | _NOFOLLOW,
                     PRIVATE_FILE_MODE, dir_fd=self.fd)
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            os.close(fd)
            self.remove(tmp)
            raise
        return fd

    def write_atomic(self, name: str, data: bytes) -> None:
        """`name` holds `data`, all of it (a reader never sees half), mode 0600."""
        os.close(self.write_new(name, data))

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "PrivateDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_own(fd: int) -> str | None:
    """The text of open file `fd` (closed here) when it is a regular file of ours."""
    with os.fdopen(fd, "rb") as f:
        if not is_ours(os.fstat(fd)):
            return None
        return f.read().decode("utf-8", "replace")


def open_append(path: str, mode: int) -> int:
    """`path` open for appending (made with `mode` when missing), never through a link:
    raises Refused (one line) when a link, a special file, another user's file or one
    with other names (a hard link planted to a file of ours) is there; OSError as the
    disk refuses."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW,
                     mode)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO no one reads
            raise
        return _refuse_file(path, describe(os.lstat(path)))
    found = os.fstat(fd)
    if is_ours(found) and found.st_nlink == 1:
        return fd
    os.close(fd)
    return _refuse_file(path, describe(found) if found.st_nlink == 1 else
                        f"a file with {found.st_nlink} names (a hard link)")


def _refuse_file(path: str, found: str):
    raise Refused(f"{path!r}: received {found}; expected a file of yours (not a link) or "
                  f"none. Fix: remove it (rm {path}), or pass a --run_dir that only you "
                  f"can write")


def own_dir(path: str) -> None:
    """Makes `path` (with the umask's mode) unless it is there, then raises Refused (one
    line) unless it is a directory of ours, not a link: for the directories that another
    program fills by names it opens itself (TensorFlow's events and profiles, py-spy's
    output), where a link or another user's directory in its place would take our files."""
    if not os.path.lexists(path):
        os.makedirs(path, exist_ok=True)
    found = os.lstat(path)
    if not is_ours(found, stat.S_ISDIR):
        raise Refused(f"{path!r}: received {describe(found)}; expected a directory of yours. "
                      f"Fix: remove it (rm {path}), or pass a --run_dir that only you can write")


def shared_dir_warning(path: str) -> str | None:
    """One line when `path` (a run dir) is a directory another user owns, or one its
    group or others can write without the sticky bit: there another user can plant a
    symlink at a name we write, or rename our directories away. None when it is safe or
    not there yet (it will be made with this user's umask)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    why = ("another user can plant a symlink at a name this run writes, or rename its "
           "files and directories away")
    fix = f"Fix: pass a --run_dir only you can write (mkdir -m 700 DIR, or chmod go-w {path})"
    if found.st_uid != os.geteuid():
        return f"{path!r}: received {describe(found)}; expected a directory of yours: {why}. {fix}"
    mode = stat.S_IMODE(found.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        who = "others" if mode & 0o002 else "its group"
        return (f"{path!r}: received a directory {who} can write (mode {mode:o}) without the "
                f"sticky bit; expected one only you can write: {why}. {fix}")
    return None
