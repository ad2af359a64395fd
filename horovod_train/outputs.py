"""The chief's output paths, checked before training starts. TF-free.

Without this, a bad --checkpoint_dir fails at the first save (possibly an hour in)
and a bad --summary_json after the whole run. Each path is tried the way it will be
used: directories are created and a probe file is written and removed; for file
outputs, the same in the file's directory.
"""
import os
import uuid

from horovod_train import fs
from horovod_train.errors import usage_error


def _outputs(config) -> list[tuple[str, str, str]]:
    """(flag, the path as given, the directory the chief writes into) of every output."""
    found = []
    for flag, directory in (("--checkpoint_dir", config.train.checkpoint_dir),
                            ("--run_dir", config.observe.run_dir)):
        if directory:
            found.append((flag, directory, directory))
    for flag, path in (("--summary_json", config.summary_json),
                       ("--export_weights", config.export_weights)):
        if path:
            found.append((flag, path, os.path.dirname(os.path.abspath(path))))
    return found


def check_writable(config) -> None:
    """Raises UsageError naming the first output path the chief cannot write."""
    for flag, given, directory in _outputs(config):
        if given != directory and os.path.isdir(given):
            raise usage_error(flag, given, "a file path (this is a directory)",
                              f"name a file inside it, e.g. {flag}={os.path.join(given, 'out')}"
                              f"{'.json' if flag == '--summary_json' else '.npz'}")
        _probe(flag, given, directory)


def _blocking_file(directory: str) -> str | None:
    """The existing non-directory on the way to a local `directory`, if that is what fails."""
    if not fs.is_local(directory):
        return None  # a URL's filesystem names its own refusal
    path = os.path.abspath(fs.local_path(directory))
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return None if os.path.isdir(path) else path


def _probe(flag: str, given: str, directory: str) -> None:
    blocking = _blocking_file(directory)
    if blocking is not None:
        raise usage_error(flag, given, f"a path whose parents are directories ({blocking} is "
                          f"a file)", f"point {flag} at a directory path")
    try:  # through fs: a --checkpoint_dir may be a URL (gs://...)
        fs.makedirs(directory)
        probe = os.path.join(directory, f".write-probe-{uuid.uuid4().hex[:8]}")
        fs.write_stream(probe, lambda f: None)
        fs.remove(probe)
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise usage_error(flag, given, f"a directory this process can create and write into "
                          f"({directory}: {reason})",
                          f"fix the path or its permissions, or point {flag} elsewhere") from None
