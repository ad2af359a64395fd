"""A value that was never given reads `not given`, never `received None` (issue 22)."""
import pytest

from horovod_train import config as cfg
from horovod_train.data import options
from horovod_train.errors import UsageError
from horovod_train.plan.errors import plan_error


@pytest.mark.parametrize("dataset, flag", [("tfrecord", "--data_dir"), ("lmdb", "--data_dir"),
                                           ("tfds", "--tfds_name")])
def test_a_data_flag_left_out_says_not_given(dataset, flag):
    with pytest.raises(UsageError) as caught:
        options.validate(cfg.DataConfig(dataset=dataset))
    message = str(caught.value)
    assert message.startswith(f"{flag}: not given; expected ")
    assert "None" not in message and "Fix: pass " + flag in message


def test_the_planner_says_not_given_too():
    message = str(plan_error("--interconnect", None, "a network name", "pass --interconnect ib-hdr"))
    assert message == ("--interconnect: not given; expected a network name. "
                       "Fix: pass --interconnect ib-hdr")
