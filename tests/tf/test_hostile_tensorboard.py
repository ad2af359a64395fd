"""TensorBoard's event file on a disk that fills: TF's many-line OpError becomes one
line naming the events file (issue 17, item 10). A real 64 KiB tmpfs (root only)."""
import os

import pytest

from unit.test_hostile_disk import tiny_tmpfs


tf = pytest.importorskip("tensorflow")

from horovod_train.errors import UsageError  # noqa: E402
from horovod_train.observe import observer as observer_lib  # noqa: E402
from horovod_train.observe.tensorboard import ScalarWriter  # noqa: E402


def test_a_full_disk_under_tensorboard_names_the_events_file(tmp_path):
    with tiny_tmpfs(tmp_path / "full") as mnt:
        writer = ScalarWriter(os.path.join(mnt, "tb"), [("a", "b")])
        with pytest.raises(OSError) as err:
            for step in range(100_000):  # ~120 B an event pair: full after ~500
                writer.write(step, {"a": 1.0, "b": 2.0})
        assert err.value.strerror == "No space left on device"
        assert os.path.basename(err.value.filename).startswith("events.out.tfevents")
        with pytest.raises(UsageError) as usage:  # as the observer reports it
            with observer_lib._writing(os.path.join(mnt, "tb")):
                raise err.value
        message = str(usage.value)
        assert message.startswith(f"--run_dir: cannot write {err.value.filename} "
                                  "(No space left on device); expected ")
        assert "\n" not in message and "Fix: free space" in message
