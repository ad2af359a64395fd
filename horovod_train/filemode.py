"""The permission bits a new file or directory gets from the umask. TF-free.

Atomic writes go through tempfile.mkstemp / mkdtemp, which create 0600 files and 0700
directories whatever the umask (a temporary name must not be readable by others).
Renamed into place, those modes would keep a shared cluster's teammates out of a
run's summary, weights and checkpoints, so each writer sets the mode open() or
mkdir() would have given, from here.
"""
import os

_STATUS = "/proc/self/status"


def umask() -> int:
    """This process's umask, read without changing it.

    Linux (4.7+) reports it in /proc/self/status. Elsewhere the only way is to set a
    umask and put the old one back, and for that instant a file another thread creates
    (TF's, the background writer's) gets the umask set meanwhile: hence /proc first,
    and 077 meanwhile, so that such a file is at worst too private, never too open.
    """
    try:
        with open(_STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o077)
    os.umask(old)
    return old


def new_file_mode() -> int:
    """What open(path, "w") gives a new file."""
    return 0o666 & ~umask()


def new_dir_mode() -> int:
    """What os.mkdir(path) gives a new directory."""
    return 0o777 & ~umask()
