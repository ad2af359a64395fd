"""Hostfile parsing, validation and formatting (launch/hostfile.py). TF-free."""
import pytest

from launch.errors import LaunchError
from launch.hostfile import (MAX_HOSTS, MAX_SLOTS, Host, check_hostname,
                             format_horovodrun_hosts, format_mpich_hostfile,
                             format_openmpi_hostfile, is_local_only, parse_hostfile,
                             parse_hostfile_text, parse_hosts_arg, total_slots)


def write(tmp_path, text, name="hosts"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


def test_every_line_form_comment_and_blank_line(tmp_path):
    path = write(tmp_path, (
        "# cluster A\n"
        "\n"
        "node01 slots=8\n"
        "node02:4   # trailing comment\n"
        "node03\n"
        "\tnode04 slots=2 max_slots=6\n"
        "10.0.0.5 slots=2\n"
        "fe80::1 slots=3\n"
        "[fe80::2]:2\n"
        "[::1]\n"
        "gpu-7.cluster.example.org:1\n"
        "   \n"))
    hosts = parse_hostfile(path)
    assert hosts == [Host("node01", 8), Host("node02", 4), Host("node03", 1),
                     Host("node04", 2, 6), Host("10.0.0.5", 2), Host("fe80::1", 3),
                     Host("fe80::2", 2), Host("::1", 1), Host("gpu-7.cluster.example.org", 1)]
    assert total_slots(hosts) == 24


def test_crlf_and_max_slots_dash_spelling(tmp_path):
    path = write(tmp_path, b"a slots=2\r\nb max-slots=4 slots=1\r\n")
    assert parse_hostfile(path) == [Host("a", 2), Host("b", 1, 4)]


def test_repeated_host_adds_slots_like_openmpi():
    text = "n1\nn2\nn1\nn1 slots=2\n"  # e.g. `srun hostname > hosts`
    assert parse_hostfile_text(text, "f") == [Host("n1", 4), Host("n2", 1)]


def test_example_hostfiles_in_repo_parse():
    assert parse_hostfile("hostfiles/localhost") == [Host("localhost", 2)]
    assert parse_hostfile("hostfiles/two_nodes") == [Host("node01", 8), Host("node02", 8)]
    generated = parse_hostfile("hostfiles/slurm_generated")
    assert [h.name for h in generated] == [f"gpu-node00{i}" for i in range(1, 5)]
    assert {h.slots for h in generated} == {8}


@pytest.mark.parametrize("line, fragment", [
    ("a;rm -rf /", "';' is not allowed"),
    ("$(reboot) slots=2", "'$' is not allowed"),
    ("`reboot`", "'`' is not allowed"),
    ("node01 slots=2;reboot", "slots"),
    ("-oProxyCommand=evil", "not starting with '-'"),
    ("nöde slots=1", "is not allowed"),
    ("node01 slots=-1", "whole number from 1 to 4096"),
    ("node01 slots=0", "whole number from 1 to 4096"),
    ("node01 slots=1e9", "digits only"),
    ("node01 slots=1.5", "digits only"),
    ("node01 slots=0x10", "digits only"),
    ("node01 slots=4097", "per-host cap"),
    ("node01 slots=1000000000", "per-host cap"),
    ("node01:", "digits only"),
    ("node01:2 slots=3", "slots given once"),
    ("node01 slots=2 slots=3", "slots given once"),
    ("node01 cpus=2", "only 'slots=N' or 'max_slots=N'"),
    ("node01 slots", "only 'slots=N' or 'max_slots=N'"),
    ("node01 slots=4 max_slots=2", "max_slots >= slots"),
    ("999.1.1.1", "valid IPv4"),
    (":::1:", "valid IPv6"),
    ("fe80::1%$(x)", "'$' is not allowed"),
    ("[node01]:2", "brackets only around IPv6"),
    ("a..b", "dot-separated labels"),
    ("x" * 64 + ".com", "dot-separated labels"),
    ("ho\x1bst", "control character"),
    ("host\x00", "control character"),
    ("host\x7f", "control character"),
])
def test_hostile_or_wrong_lines_rejected_with_file_and_line(tmp_path, line, fragment):
    path = write(tmp_path, f"# header\nok-node slots=1\n{line}\n")
    with pytest.raises(LaunchError) as err:
        parse_hostfile(path)
    message = str(err.value)
    assert f"{path}:3" in message
    assert fragment in message
    assert "expected" in message and "Fix: e.g." in message
    assert "\n" not in message


def test_vertical_tab_is_not_a_line_break(tmp_path):
    # str.splitlines() would split here and hide the control character.
    path = write(tmp_path, "node01\x0bnode02 slots=1\n")
    with pytest.raises(LaunchError, match=r"hosts:1: .*control character"):
        parse_hostfile(path)


def test_ten_thousand_distinct_hosts_rejected_at_the_line_over_the_cap(tmp_path):
    path = write(tmp_path, "".join(f"node{i:05d} slots=1\n" for i in range(10_000)))
    with pytest.raises(LaunchError) as err:
        parse_hostfile(path)
    assert f"{path}:{MAX_HOSTS + 1}" in str(err.value)
    assert f"at most {MAX_HOSTS} distinct hosts" in str(err.value)


def test_ten_thousand_repeats_of_one_host_hit_the_slot_cap(tmp_path):
    path = write(tmp_path, "node01\n" * 10_000)
    with pytest.raises(LaunchError, match=rf"hosts:{MAX_SLOTS + 1}: .*repeated host"):
        parse_hostfile(path)


def test_too_many_lines_and_too_big_file(tmp_path):
    with pytest.raises(LaunchError, match="at most 65536 lines"):
        parse_hostfile(write(tmp_path, "# c\n" * 70_000, "many"))
    with pytest.raises(LaunchError, match="MiB"):
        parse_hostfile(write(tmp_path, "#" * (5 << 20), "big"))


def test_invalid_utf8_names_the_line(tmp_path):
    path = write(tmp_path, b"node01\nnode\xff02\n")
    with pytest.raises(LaunchError, match=r"hosts:2: .*UTF-8"):
        parse_hostfile(path)


def test_missing_file_directory_and_empty_file(tmp_path):
    with pytest.raises(LaunchError, match="missing file"):
        parse_hostfile(tmp_path / "nope")
    with pytest.raises(LaunchError, match="a directory"):
        parse_hostfile(tmp_path)
    with pytest.raises(LaunchError, match="at least one host line"):
        parse_hostfile(write(tmp_path, "# only comments\n\n"))


def test_hosts_arg_forms():
    assert parse_hosts_arg("h1:2,h2:2") == [Host("h1", 2), Host("h2", 2)]
    assert parse_hosts_arg("h1,[::1]:2,10.1.2.3:4") == [
        Host("h1", 1), Host("::1", 2), Host("10.1.2.3", 4)]


@pytest.mark.parametrize("text, fragment", [
    ("h1:2,,h2", "entry 2"),
    ("h1:2, h2:2", "without spaces"),
    ("h1:2,h2\nh3:2", "control character"),
    ("h1:2,$(reboot):2", "'$' is not allowed"),
    ("h1:-1", "digits only"),
    ("", "comma-separated host list"),
])
def test_hosts_arg_rejections_name_the_entry(text, fragment):
    with pytest.raises(LaunchError) as err:
        parse_hosts_arg(text)
    assert str(err.value).startswith("-H")
    assert fragment in str(err.value)


def test_host_constructor_validates():
    with pytest.raises(LaunchError):
        Host("a b")
    with pytest.raises(LaunchError):
        Host("node", 0)
    with pytest.raises(LaunchError):
        Host("node", True)
    assert check_hostname("node_01.rack-2", "x") == "node_01.rack-2"


def test_formats():
    hosts = [Host("h1", 2), Host("h2", 2, 4)]
    assert format_horovodrun_hosts(hosts) == "h1:2,h2:2"
    assert format_openmpi_hostfile(hosts) == "h1 slots=2\nh2 slots=2 max_slots=4\n"
    assert format_mpich_hostfile(hosts) == "h1:2\nh2:2\n"
    assert parse_hostfile_text(format_openmpi_hostfile(hosts)) == hosts


def test_ipv6_cannot_go_in_colon_lists():
    with pytest.raises(LaunchError, match="IPv6"):
        format_horovodrun_hosts([Host("fe80::1", 2)])
    assert format_openmpi_hostfile([Host("fe80::1", 2)]) == "fe80::1 slots=2\n"


def test_address_and_local_only():
    assert Host("fe80::1").address(80) == "[fe80::1]:80"
    assert Host("n1").address(80) == "n1:80"
    assert is_local_only([Host("localhost", 2), Host("127.0.0.1")])
    assert not is_local_only([Host("localhost"), Host("node01")])
