"""backends/tf_config.validate: every way a given TF_CONFIG is refused, and what passes.

Each refusal is one UsageError line naming the TF_CONFIG field, what was received, and
the fix (an example TF_CONFIG). TF-free.
"""
import json

import pytest

from horovod_train.backends import tf_config as tfc
from horovod_train.errors import UsageError


def _config(workers=("localhost:23456", "localhost:23457"), index=0, task_type="worker",
            **cluster_extra):
    return json.dumps({"cluster": {"worker": list(workers), **cluster_extra},
                       "task": {"type": task_type, "index": index}})


def _refusal(raw: str) -> str:
    with pytest.raises(UsageError) as err:
        tfc.validate(raw)
    message = str(err.value)
    assert "Fix: set TF_CONFIG like" in message or "Fix: give each worker" in message
    return message


def test_a_good_config_is_returned_parsed():
    config = tfc.validate(_config(index=1))
    assert config["cluster"]["worker"] == ["localhost:23456", "localhost:23457"]
    assert config["task"] == {"type": "worker", "index": 1}


def test_ipv6_and_named_hosts_pass():
    tfc.validate(_config(workers=("[fe80::1]:23456", "node01:1", "node02:65535")))


@pytest.mark.parametrize("raw", ["", "{", "not json", '{"cluster": }'])
def test_invalid_json(raw):
    assert "TF_CONFIG (JSON): received" in _refusal(raw)


def test_invalid_json_is_cut_to_80_characters():
    message = _refusal("x" * 500)
    assert "x" * 80 in message and "x" * 81 not in message


@pytest.mark.parametrize("raw", ["[]", '"worker"', "3", "null"])
def test_top_level_not_an_object(raw):
    assert "TF_CONFIG (top level): received" in _refusal(raw)
    assert "expected a JSON object" in _refusal(raw)


@pytest.mark.parametrize("config", [
    {},  # no cluster
    {"cluster": []},  # cluster not an object
    {"cluster": {}},  # no worker list
    {"cluster": {"worker": "localhost:23456"}},  # a string, not a list
    {"cluster": {"worker": []}},  # empty
])
def test_cluster_worker_must_be_a_non_empty_list(config):
    message = _refusal(json.dumps({**config, "task": {"type": "worker", "index": 0}}))
    assert "TF_CONFIG cluster.worker:" in message
    assert "a non-empty list of host:port" in message


@pytest.mark.parametrize("address", ["localhost", ":23456", "localhost:", "localhost:port",
                                     "localhost:0", "localhost:65536", "localhost:-1", 23456])
def test_worker_address_must_be_host_and_port(address):
    message = _refusal(_config(workers=("localhost:23456", address)))
    assert f"TF_CONFIG cluster.worker: received {address!r}" in message
    assert "port in 1..65535" in message


@pytest.mark.parametrize("workers, received", [
    (("localhost:23456", "localhost:23456"), "'localhost:23456' twice"),
    (("localhost:23456", "127.0.0.1:23456"), "'localhost:23456' and '127.0.0.1:23456'"),
    (("Node01:23456", "node01:23456"), "'Node01:23456' and 'node01:23456'"),
])
def test_one_address_twice_is_refused(workers, received):
    message = _refusal(_config(workers=workers))
    assert f"cluster.worker: received {received}" in message
    assert "for workers 0 and 1" in message
    assert "Fix: give each worker its own port" in message


@pytest.mark.parametrize("extra", [{"chief": ["localhost:2"]}, {"ps": ["localhost:3"]},
                                   {"evaluator": ["localhost:4"]}])
def test_only_worker_tasks(extra):
    message = _refusal(_config(**extra))
    assert "TF_CONFIG cluster: received" in message
    assert "only 'worker' tasks" in message


@pytest.mark.parametrize("task, received", [
    (None, "None"),  # no task
    ("worker", "'worker'"),  # not an object
    ({"index": 0}, "None"),  # no type
    ({"type": "chief", "index": 0}, "'chief'"),
])
def test_task_type_must_be_worker(task, received):
    raw = json.dumps({"cluster": {"worker": ["localhost:23456"]}, "task": task})
    message = _refusal(raw)
    assert f"TF_CONFIG task.type: received {received}" in message
    assert "expected 'worker'" in message


@pytest.mark.parametrize("index", [None, "0", 1.0, -1, 2, 99])
def test_task_index_must_be_a_worker_index(index):
    message = _refusal(_config(index=index))
    assert f"TF_CONFIG task.index: received {index!r}" in message
    assert "an integer in [0, 2)" in message


def test_each_field_is_checked_in_order():
    """A config wrong in several places names the first: cluster before task."""
    raw = json.dumps({"cluster": {"worker": []}, "task": {"type": "ps", "index": 9}})
    assert "cluster.worker" in _refusal(raw)
