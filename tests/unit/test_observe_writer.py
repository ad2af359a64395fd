"""The chief's background writer: order kept, close drains, a failure reaches the caller."""
import pytest

from horovod_train.observe.writer import BackgroundWriter


def test_writes_run_in_order_and_close_drains():
    done = []
    writer = BackgroundWriter()
    for i in range(200):
        writer.submit(done.append, i)
    writer.close()
    assert done == list(range(200))


def test_a_failed_write_is_raised_in_the_caller():
    def full_disk(_):
        raise OSError(28, "No space left on device")

    writer = BackgroundWriter()
    writer.submit(full_disk, 1)
    with pytest.raises(OSError, match="No space left"):
        writer.close()
