"""Slurm node list and task count expansion without scontrol (launch/slurm_nodes.py)."""
import pytest

from launch.errors import LaunchError
from launch.hostfile import Host
from launch.slurm_nodes import (expand_nodelist, expand_tasks_per_node, hosts_from_slurm,
                                hosts_from_slurm_env)


@pytest.mark.parametrize("text, expected", [
    ("node[01-04,07],gpu-[1-2]",
     ["node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"]),
    ("solo", ["solo"]),
    ("a,b,c", ["a", "b", "c"]),
    ("n[8-10]", ["n8", "n9", "n10"]),            # width of the low bound: no padding
    ("n[08-10]", ["n08", "n09", "n10"]),         # zero padding kept
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[1-2].ib", ["n1.ib", "n2.ib"]),
    ("n[1,1,2],n1", ["n1", "n2"]),               # duplicates dropped, order kept
    (" n[1-2] ", ["n1", "n2"]),
])
def test_expand_nodelist(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("node[1-", "every '[' closed"),
    ("node]1[", "']' only after a '['"),
    ("n[[1]]", "no nested brackets"),
    ("n[]", "numbers inside brackets"),
    ("n[a-b]", "ranges like"),
    ("n[3-1]", "start is not above its end"),
    ("n[1-2],,m", "no empty entries"),
    ("n[1-5000]", "at most 4096 hosts"),
    ("r[1-100]n[1-100]", "at most 4096 hosts"),
    ("n[1-2];reboot", "';' is not allowed"),
    ("$(reboot)", "'$' is not allowed"),
    ("", "a Slurm node list"),
])
def test_bad_nodelists_rejected(text, fragment):
    with pytest.raises(LaunchError) as err:
        expand_nodelist(text)
    assert str(err.value).startswith("SLURM_JOB_NODELIST")
    assert fragment in str(err.value)
    assert "Fix: e.g." in str(err.value)


@pytest.mark.parametrize("text, expected", [
    ("2(x3),1", [2, 2, 2, 1]),
    ("8", [8]),
    ("4(x2)", [4, 4]),
    ("1,2,3", [1, 2, 3]),
])
def test_expand_tasks_per_node(text, expected):
    assert expand_tasks_per_node(text) == expected


@pytest.mark.parametrize("text", ["", "2(x0)", "0", "2x3", "2(3)", "-1", "2(x3)1", "5000"])
def test_bad_task_counts_rejected(text):
    with pytest.raises(LaunchError, match="SLURM_TASKS_PER_NODE"):
        expand_tasks_per_node(text)


def test_hosts_from_slurm_pairs_names_and_counts():
    assert hosts_from_slurm("n[1-3],g1", "2(x3),1") == [
        Host("n1", 2), Host("n2", 2), Host("n3", 2), Host("g1", 1)]
    with pytest.raises(LaunchError, match=r"one count per node \(2 nodes"):
        hosts_from_slurm("n[1-2]", "2(x3)")


def test_hosts_from_slurm_env():
    env = {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_TASKS_PER_NODE": "8(x2)"}
    assert hosts_from_slurm_env(env) == [Host("gpu01", 8), Host("gpu02", 8)]
    with pytest.raises(LaunchError, match="inside a Slurm job"):
        hosts_from_slurm_env({})
