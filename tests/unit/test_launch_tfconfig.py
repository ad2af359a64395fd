"""TF_CONFIG for MWMS workers (launch/tfconfig.py)."""
import json

import pytest

from launch.errors import LaunchError
from launch.hostfile import Host, parse_hosts_arg
from launch.tfconfig import (ENV_HOSTS, ENV_PORT_BASE, all_tf_configs, tf_config,
                             tf_config_for_worker, to_json, worker_addresses,
                             worker_env_contract)


def test_tf_config_shape_is_what_tensorflow_reads():
    config = tf_config(["h1:2222", "h2:2222"], 1)
    assert config == {"cluster": {"worker": ["h1:2222", "h2:2222"]},
                      "task": {"type": "worker", "index": 1}}
    assert json.loads(to_json(config)) == config


def test_multi_slot_hosts_get_consecutive_ports():
    hosts = [Host("h1", 2), Host("h2", 3)]
    assert worker_addresses(hosts, 20000) == [
        "h1:20000", "h1:20001", "h2:20000", "h2:20001", "h2:20002"]
    config = tf_config_for_worker(hosts, 3, 20000)
    assert config["task"] == {"type": "worker", "index": 3}
    assert config["cluster"]["worker"][3] == "h2:20001"


def test_all_configs_share_the_cluster_and_differ_in_index():
    configs = all_tf_configs([Host("localhost", 3)], 12345)
    assert [c["task"]["index"] for c in configs] == [0, 1, 2]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)


def test_ipv6_addresses_are_bracketed():
    assert worker_addresses([Host("fe80::1", 2)], 5000) == ["[fe80::1]:5000", "[fe80::1]:5001"]


@pytest.mark.parametrize("args, fragment", [
    ((["h1:1"], 1), "from 0 to 0"),
    ((["h1:1"], -1), "from 0 to 0"),
    ((["h1:1"], True), "worker index"),
    (([], 0), "at least one"),
    ((["h1"], 0), "'host:port'"),
    ((["h1:99999"], 0), "port from 1 to 65535"),
    ((["h1;x:1"], 0), "';' is not allowed"),
    ((["h1:1", "h1:1"], 0), "distinct"),
    ((["h1:1"], 0, "chief"), "'worker'"),
])
def test_tf_config_rejections(args, fragment):
    with pytest.raises(LaunchError) as err:
        tf_config(*args)
    assert fragment in str(err.value)


def test_port_base_must_leave_room_for_every_slot():
    assert worker_addresses([Host("h", 4)], 65532)[-1] == "h:65535"
    with pytest.raises(LaunchError, match="from 1024 to 65532"):
        worker_addresses([Host("h", 4)], 65533)
    with pytest.raises(LaunchError, match="from 1024"):
        worker_addresses([Host("h", 1)], 80)


def test_worker_env_contract_round_trips_through_the_h_parser():
    hosts = [Host("h1", 2), Host("fe80::1", 1)]
    env = worker_env_contract(hosts, 23456)
    assert env == {ENV_HOSTS: "h1:2,[fe80::1]:1", ENV_PORT_BASE: "23456"}
    assert parse_hosts_arg(env[ENV_HOSTS]) == hosts
