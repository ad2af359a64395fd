"""Issue 17 ("Nothing lost, nothing hangs"), launch and rendezvous side, no TensorFlow:
duplicate TF_CONFIG addresses, port bases outside the ephemeral range, a bind that
waits out a transient holder and names a lasting one."""
import json
import os
import signal
import subprocess
import sys
import time

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


# --------------------------------------------------------------- item 15: port bases

def test_ephemeral_range_is_read_from_the_kernel_text():
    from launch import ports
    assert ports.parse_port_range("32768\t60999\n") == (32768, 60999)
    assert ports.parse_port_range("garbage") == ports.DEFAULT_EPHEMERAL


def test_base_lies_below_the_ephemeral_range_and_skips_busy_ports():
    from launch import ports
    busy = {20000, 20003}
    base = ports.pick_port_base(2, (20004, 60999), lambda p: p not in busy, start=0, lowest=19998)
    # 19998..19999 is the only free pair below 20004 whose ports all sit under the range.
    assert base == 19998
    base = ports.pick_port_base(2, (20004, 60999), lambda p: p not in busy, start=1, lowest=19998)
    assert base == 20001 and base + 1 < 20004


def test_no_room_below_goes_above_and_none_at_all_is_an_error():
    from launch import ports
    assert ports.pick_port_base(4, (1024, 65000), lambda p: True, start=0) == 65001
    with pytest.raises(LaunchError, match="ip_local_port_range"):
        ports.pick_port_base(4, (1024, 65535), lambda p: True, start=0)


def test_real_port_bases_avoid_this_machines_ephemeral_range():
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    from bench import common
    from launch import ports
    from ranks import free_ports
    low, _ = ports.read_ephemeral_range()
    listed = free_ports(3)
    assert listed == [listed[0], listed[0] + 1, listed[0] + 2] and listed[-1] < low
    assert common.free_port_base(2) + 1 < low


def test_launch_refuses_local_worker_ports_inside_the_ephemeral_range():
    from launch import spec
    request = spec.LaunchSpec(backend="mwms", command=("python",), hosts=(Host("localhost", 2),),
                              port_base=40000, ephemeral_ports=(32768, 60999))
    with pytest.raises(LaunchError, match="ephemeral"):
        spec.build_plan(request, {})
    remote = spec.LaunchSpec(backend="mwms", command=("python",), hosts=(Host("n1", 2),),
                             port_base=40000, ephemeral_ports=(32768, 60999))
    assert spec.build_plan(remote, {}).launcher == "mpirun"  # their range is not ours to know


# --------------------------------------------------------------- item 15: the bind

def _held_port():
    import socket
    from launch import ports
    holder = socket.socket()
    holder.bind(("", ports.free_port_base(1)))
    holder.listen(1)
    return holder, holder.getsockname()[1]


def _outgoing_from(port: int):
    """A connection whose source port is `port`: what an outgoing connection drawn from
    the ephemeral range looks like to a worker that wants to listen there."""
    import socket
    server, _ = _held_port()
    client = socket.socket()
    client.bind(("", port))
    client.connect(server.getsockname())
    return server, client


def test_bind_waits_out_a_transient_outgoing_connection():
    import threading
    import time
    from launch import ports
    port = ports.free_port_base(1)
    server, client = _outgoing_from(port)

    def close():
        client.close()
        server.close()
    threading.Timer(1.0, close).start()
    listener = worker_tfc.bind_listener(port, f"localhost:{port}", 0, time.monotonic() + 20)
    assert listener.getsockname()[1] == port
    listener.close()


def test_a_listening_holder_is_named_at_once_not_after_the_timeout():
    """Issue 46: another server on the port will not go away by waiting; the worker says
    so within seconds (it used to retry silently for the whole --collective_timeout_s)."""
    import time
    holder, port = _held_port()
    start = time.monotonic()
    with holder, pytest.raises(UsageError) as err:
        worker_tfc.bind_listener(port, f"localhost:{port}", 1, time.monotonic() + 300)
    message = str(err.value)
    assert time.monotonic() - start < 3
    assert f"cluster.worker[1]: port {port} of localhost:{port} is in use" in message
    assert f"held by pid {os.getpid()}" in message and "\n" not in message
    assert "listening" in message and "Fix: " in message


def test_a_lasting_outgoing_connection_is_named_when_the_time_is_up():
    import time
    from launch import ports
    port = ports.free_port_base(1)
    server, client = _outgoing_from(port)
    start = time.monotonic()
    with server, client, pytest.raises(UsageError) as err:
        worker_tfc.bind_listener(port, f"localhost:{port}", 1, time.monotonic() + 1.5)
    assert 1.4 < time.monotonic() - start < 10
    assert f"held by pid {os.getpid()}" in str(err.value)


# --------------------------------------------------------------- item 6: the tree dies

# dash runs `sleep` as a child rather than exec'ing it (the '; true' makes sure): the shape
# of horovodrun --mpi, whose /bin/sh leaves mpirun as a grandchild in its process group.
SHELL_AND_GRANDCHILD = ["sh", "-c", "sleep 600; true"]
IGNORES_SIGTERM = [sys.executable, "-c", "import signal, time; "
                   "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
# The shape of horovodrun: it outlives SIGTERM while it waits for its rank launchers,
# which call setsid, so no signal to horovodrun's group reaches them or their ranks.
CHILD_IN_OWN_SESSION = [sys.executable, "-c", "import signal, subprocess, sys, time; "
                        "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "subprocess.Popen(sys.argv[1:], start_new_session=True); time.sleep(600)",
                        *IGNORES_SIGTERM]


def wait_for_tree(root: int, size: int, timeout: float = 20) -> dict[int, int]:
    from ranks import process_tree
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tree = process_tree(root)
        if len(tree) >= size:
            time.sleep(0.3)  # children finish their exec
            return process_tree(root)
        time.sleep(0.1)
    raise AssertionError(f"the launcher's tree never reached {size} processes: {tree}")


@pytest.mark.parametrize("command, size", [(SHELL_AND_GRANDCHILD, 5), (IGNORES_SIGTERM, 3),
                                           (CHILD_IN_OWN_SESSION, 5)],
                         ids=["shell-and-grandchild", "ignores-sigterm", "child-in-own-session"])
def test_sigkilled_launcher_takes_its_whole_tree_with_it(command, size):
    """Item 6: every child and grandchild of `python -m launch run` kept running."""
    from helpers import ROOT, child_env
    from ranks import kill_tree, still_running
    launcher = subprocess.Popen([sys.executable, "-m", "launch", "run", "--backend", "mwms",
                                 "-H", "localhost:2", "--", *command], cwd=ROOT,
                                env=child_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree = wait_for_tree(launcher.pid, size)  # launcher, 2 workers (+ 2 sleeps)
    try:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 10
        while still_running(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = still_running(tree)
        assert not left, f"still running 10 s after the launcher's SIGKILL: {left} of {tree}"
    finally:
        kill_tree(tree)


def test_guard_reads_its_orders_until_done_or_eof():
    from launch import guard
    assert guard.read_orders(["group 10\n", "group 11\n", "exited 10\n"]) == ({11}, False)
    assert guard.read_orders(["group 10\n", "done\n", "group 12\n"]) == ({10}, True)
    assert guard.read_orders(["junk\n", "group x\n"]) == (set(), False)


def test_guard_lists_a_groups_live_members_skipping_zombies_and_the_vanished(tmp_path):
    """/proc as the guard reads it: a member, a zombie of the group, another group's
    process, and a process that ended between listing /proc and reading its stat (its
    directory without the file): only the live member counts."""
    from launch import guard
    stats = {"101": "101 (python) S 1 77 77", "102": "102 (sh) Z 1 77 77",
             "103": "103 (x) S 1 88 88", "104": None, "self": None}
    for pid, stat in stats.items():
        (tmp_path / pid).mkdir()
        if stat is not None:
            (tmp_path / pid / "stat").write_text(stat + " 0 0\n")
    assert guard.live_members(77, proc=str(tmp_path)) == [101]


def test_guard_sweep_terms_then_kills_only_what_is_left(monkeypatch):
    from launch import guard
    sent = []
    monkeypatch.setattr(guard.os, "killpg", lambda pgid, sig: sent.append(("group", pgid, sig)))
    monkeypatch.setattr(guard.os, "kill", lambda pid, sig: sent.append(("pid", pid, sig)))
    now = [0.0]
    # pid -> (parent, group). Group 1 obeys SIGTERM; group 2 ignores it; group 3 has
    # ended. Pid 3 (group 2) started pid 30 in a session of its own, which started 31:
    # strays, signalled one by one. Pid 40 is unrelated and is never touched.
    table = {1: (0, 1), 2: (0, 2), 3: (2, 2), 30: (3, 30), 31: (30, 30), 40: (0, 40)}

    def sleep(seconds):
        now[0] += seconds
        table.pop(1, None)
        table.pop(31, None)  # a stray that obeys SIGTERM
    killed = guard.sweep([1, 2, 3], grace_s=1.0, table=lambda: dict(table),
                         clock=lambda: now[0], sleep=sleep)
    assert killed == {2}
    assert sorted(sent) == sorted([("group", 1, signal.SIGTERM), ("group", 2, signal.SIGTERM),
                                   ("pid", 30, signal.SIGTERM), ("pid", 31, signal.SIGTERM),
                                   ("group", 2, signal.SIGKILL), ("pid", 30, signal.SIGKILL)])


def test_guard_strays_are_descendants_outside_the_guarded_groups():
    from launch import guard
    table = {5: (1, 5), 6: (5, 5), 7: (6, 7), 8: (7, 7), 9: (1, 9)}
    assert guard.strays({5}, table) == {7, 8}
    assert guard.strays({5, 7}, table) == set()
    assert guard.strays(set(), table) == set()
