"""Which steps run as the timed split step: early intervals, then about every 100 steps."""

from horovod_train.metrics import sample_split



def _sampled(log_every, steps=1000):
    return [s for s in range(1, steps + 1) if sample_split(s, log_every)]


def test_first_two_intervals_then_about_every_hundred_steps():
    assert _sampled(20)[:6] == [20, 40, 100, 200, 300, 400]
    assert _sampled(10)[:4] == [10, 20, 100, 200]
    assert len(_sampled(20)) <= 1000 // 100 + 2


def test_long_intervals_sample_every_interval():
    assert _sampled(200) == [200, 400, 600, 800, 1000]
    assert _sampled(150, 600) == [150, 300, 450, 600]
