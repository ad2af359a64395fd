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


def test_a_failure_stays_raised_and_later_writes_are_not_attempted():
    # Raised once and then forgotten, a caller that caught it would close "cleanly".
    done = []

    def full_disk(_):
        raise OSError(28, "No space left on device")

    writer = BackgroundWriter()
    writer.submit(full_disk, 1)
    with pytest.raises(OSError, match="No space left"):
        writer.flush()
    with pytest.raises(OSError, match="No space left"):
        writer.submit(done.append, 2)
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    assert done == []


def test_an_exit_inside_a_write_reaches_the_caller_not_the_thread_hook(capfd):
    # A BaseException used to kill the thread with a traceback printed by threading's
    # hook, and the run went on with nothing written and nothing said.
    def exits(_):
        raise SystemExit(3)

    writer = BackgroundWriter()
    writer.submit(exits, 1)
    with pytest.raises(SystemExit):
        writer.close()
    assert "Traceback" not in capfd.readouterr().err
