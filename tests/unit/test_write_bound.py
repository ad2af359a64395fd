"""write_bound: the chief's checkpoint write is bounded and shows its progress (issue 55
item 3; the real thing, with ranks and a write that never ends, is in
tests/multiprocess/test_checkpoint_faults.py)."""
import logging

from horovod_train import write_bound
from horovod_train.write_bound import WriteBound, state_bytes, write_limit_s


class Var:
    def __init__(self, shape, dtype="float32"):
        self.shape, self.dtype = shape, dtype


def _bound(step, limit_s=10.0, round_s=2.0, progress_every_s=4.0):
    fed, ended = [], []
    bound = WriteBound(limit_s=limit_s, round_s=round_s, rank=1, directory="/ck",
                       step_of=lambda: step[0], alive=lambda: fed.append(1),
                       progress_every_s=progress_every_s, on_expire=ended.append)
    return bound, fed, ended


def test_the_limit_is_the_flag_or_the_size_at_a_slow_rate_whichever_is_longer():
    assert write_limit_s(600, 50 * 10 ** 6) == 600  # a small model: the flag
    assert write_limit_s(600, 84 * 10 ** 9) == 84 * 10 ** 9 / write_bound.SLOWEST_BYTES_PER_S
    # Whole variables, each at its dtype's size; a gathered slot (no dtype) as float32.
    assert state_bytes([Var((3, 4)), Var((5,), "int64"), type("Slot", (), {"shape": (2, 2)})]) \
        == 12 * 4 + 5 * 8 + 4 * 4


def test_rounds_feed_the_watchdog_and_end_every_rank_past_the_limit(caplog):
    step = [20]
    bound, fed, ended = _bound(step)
    with caplog.at_level(logging.INFO, logger="absl"):  # another test may have set absl's level
        for _ in range(5):  # 10 s of rounds: at the limit, not past it
            bound()
    assert len(fed) == 5 and ended == []
    progress = [r.getMessage() for r in caplog.records if "still writing" in r.getMessage()]
    assert progress == ["checkpoint | still writing /ck/ckpt-000000020 after 4 s (ended at 10 s: "
                        "--checkpoint_timeout_s)",
                        "checkpoint | still writing /ck/ckpt-000000020 after 8 s (ended at 10 s: "
                        "--checkpoint_timeout_s)"]
    bound()  # 12 s
    assert len(ended) == 1
    line = ended[0]
    assert line.startswith("rank 1: the chief's checkpoint write of step 20 to "
                           "/ck/ckpt-000000020 has not ended after 12 s (limit 10 s: "
                           "--checkpoint_timeout_s")
    assert "the checkpoints committed before it are intact" in line and "relaunch" in line
    assert "\n" not in line


def test_the_last_line_masks_a_checkpoint_url_s_credentials(capsys, monkeypatch):
    """The line is printed, not logged (logging's filter masks those): masked here."""
    monkeypatch.setattr(write_bound.watchdog.os, "_exit", lambda code: exits.append(code))
    exits = []
    bound = WriteBound(limit_s=1.0, round_s=2.0, rank=0, directory="gs://user:Secret1@b/ck",
                       step_of=lambda: 7, alive=lambda: None)
    bound()
    err = capsys.readouterr().err
    assert exits == [75] and "Secret1" not in err
    assert "horovod_train: stopped: rank 0: the chief's checkpoint write of step 7 to " \
           "gs://***@b/ck/ckpt-000000007 has not ended after 2 s" in err


def test_each_write_has_its_own_clock():
    """A new step is a new write: the rounds of earlier writes do not add up."""
    step = [10]
    bound, _, ended = _bound(step)
    for _ in range(5):
        bound()
    step[0] = 20
    for _ in range(5):
        bound()
    assert ended == []
