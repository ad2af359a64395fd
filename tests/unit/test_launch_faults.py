"""Issue 17 ("Nothing lost, nothing hangs"), launch and rendezvous side, no TensorFlow:
duplicate TF_CONFIG addresses, port bases outside the ephemeral range, a bind that
waits out a transient holder and names a lasting one."""
import json

import pytest

from horovod_train.backends import tf_config as worker_tfc
from horovod_train.errors import UsageError
from launch.errors import LaunchError
from launch.hostfile import Host
from launch.tfconfig import all_tf_configs, tf_config

TWICE = {"cluster": {"worker": ["localhost:23456", "localhost:23456"]},
         "task": {"type": "worker", "index": 0}}


# --------------------------------------------------------------- item 3: duplicates

def test_worker_refuses_one_address_listed_twice():
    with pytest.raises(UsageError) as err:
        worker_tfc.validate(json.dumps(TWICE))
    message = str(err.value)
    assert "\n" not in message
    assert "'localhost:23456'" in message and "workers 0 and 1" in message
    assert "expected a distinct host:port for every worker" in message and "Fix: " in message


@pytest.mark.parametrize("workers, pair", [
    (["a:1", "b:1", "A:1"], "workers 0 and 2"),            # host names are case-blind
    (["localhost:5000", "127.0.0.1:5000"], "workers 0 and 1"),  # both this machine
    (["h:1", "h:2", "h:3", "h:02"], "workers 1 and 3"),     # same port number
])
def test_worker_refuses_aliases_of_one_address(workers, pair):
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
    with pytest.raises(UsageError, match=pair):
        worker_tfc.validate(json.dumps(config))


def test_distinct_addresses_still_pass():
    config = {"cluster": {"worker": ["localhost:1", "localhost:2", "h:1"]},
              "task": {"type": "worker", "index": 2}}
    assert worker_tfc.validate(json.dumps(config)) == config


def test_launcher_names_the_duplicate_and_both_indexes():
    with pytest.raises(LaunchError) as err:
        tf_config(["n1:1", "n2:1", "n1:1"], 0)
    message = str(err.value)
    assert "'n1:1'" in message and "workers 0 and 2" in message and "distinct" in message


def test_launcher_refuses_two_names_of_this_machine_sharing_ports():
    # localhost and 127.0.0.1 are one machine: both workers would listen on port_base.
    with pytest.raises(LaunchError, match="workers 0 and 1"):
        all_tf_configs([Host("localhost", 1), Host("127.0.0.1", 1)], 20000)


@pytest.mark.parametrize("value", ["abc", "80", "70000", ""])
def test_bad_port_base_variable_is_a_usage_line(value):
    environ = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1", "HOROVOD_TRAIN_MWMS_PORT_BASE": value}
    with pytest.raises(UsageError) as err:
        worker_tfc.resolve_tf_config(environ, 12345)
    assert f"HOROVOD_TRAIN_MWMS_PORT_BASE: received {value!r}" in str(err.value)
