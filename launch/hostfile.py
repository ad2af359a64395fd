"""Hostfiles: parse, validate and format. Standard library only.

Accepted line forms (one host per line, OpenMPI and Horovod conventions):
    node01 slots=8            OpenMPI / horovodrun --hostfile
    node01 slots=8 max_slots=16
    node01:8                  Horovod / MPICH style
    node01                    bare host, one slot
    [fe80::1]:4  or  fe80::1 slots=4    IPv6 (brackets needed with the ':N' form)
    # comment, blank lines, and trailing '# comments' are ignored

Host names end up as arguments of ssh, mpirun and srun on other machines, where a
remote shell may see them. So a name must be a plain DNS name or an IP address:
anything else (';', '$(...)', spaces, control characters, a leading '-') is refused
with the file and line, never escaped and passed on.
"""
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from launch.errors import launch_error

# Caps that turn typos and hostile files into clean errors instead of huge plans.
MAX_SLOTS = 4096          # per host; far above any real node's GPU or core count
MAX_HOSTS = 4096          # distinct hosts in one job
MAX_LINES = 65536         # lines in one hostfile, comments included
MAX_FILE_BYTES = 4 << 20  # a 4096-host file is ~100 KB; 4 MiB leaves room for comments
MAX_NAME_CHARS = 253      # the DNS limit for a full name

LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1"})

_NAME_CHARS = re.compile(r"[A-Za-z0-9._:%-]")
# Underscores are not legal in DNS, but Slurm node names and /etc/hosts entries use them.
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_SCOPE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_DIGITS = re.compile(r"^[0-9]+$")

_NAME_EXPECTED = ("a DNS name or an IPv4/IPv6 address (letters, digits, '-', '.', '_'; "
                  "not starting with '-')")
_LINE_EXAMPLE = "'node01 slots=8', 'node01:8', 'node01' or '[fe80::1]:8'"


@dataclass(frozen=True)
class Host:
    """One host and how many ranks it may run (slots).

    Built through parse_* or directly; the constructor validates, so a Host in hand
    is always safe to put on a command line.
    """
    name: str
    slots: int = 1
    max_slots: int | None = None

    def __post_init__(self):
        check_hostname(self.name, "host")
        check_slot_count(self.slots, "host %r: slots" % self.name)
        if self.max_slots is not None:
            check_slot_count(self.max_slots, "host %r: max_slots" % self.name)
            if self.max_slots < self.slots:
                raise launch_error(f"host {self.name!r}: max_slots", self.max_slots,
                                   f"a number >= slots ({self.slots})",
                                   f"{self.name} slots={self.slots} max_slots={self.slots}")

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.name

    def address(self, port: int) -> str:
        """'host:port', with IPv6 in brackets as gRPC and URLs require."""
        return f"[{self.name}]:{port}" if self.is_ipv6 else f"{self.name}:{port}"


# ----------------------------------------------------------------------------- checks

def check_hostname(name, where: str) -> str:
    """Returns `name` if it is a safe host name or IP address, else raises LaunchError."""
    example = "node01, gpu-7.cluster.local, 10.0.0.5 or fe80::1"
    if not isinstance(name, str) or not name:
        raise launch_error(where, name, _NAME_EXPECTED, example)
    if len(name) > MAX_NAME_CHARS:
        raise launch_error(where, name, f"at most {MAX_NAME_CHARS} characters", example)
    for char in name:
        if not _NAME_CHARS.fullmatch(char):
            raise launch_error(where, name, f"{_NAME_EXPECTED}; {char!r} is not allowed",
                               example)
    if ":" in name:
        _check_ipv6(name, where, example)
    elif "%" in name:
        raise launch_error(where, name, "'%' only in an IPv6 zone (fe80::1%eth0)", example)
    elif re.fullmatch(r"[0-9.]+", name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise launch_error(where, name, "a valid IPv4 address", "10.0.0.5") from None
    elif not all(_LABEL.match(label) for label in name.split(".")):
        raise launch_error(where, name, _NAME_EXPECTED +
                           " with dot-separated labels of 1-63 characters", example)
    return name


def _check_ipv6(name: str, where: str, example: str) -> None:
    address, _, scope = name.partition("%")
    # ipaddress accepts any zone text after '%', so the zone is checked separately.
    if "%" in name and not _SCOPE_ID.match(scope):
        raise launch_error(where, name, "an IPv6 zone of letters, digits, '_', '.', '-'",
                           "fe80::1%eth0")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise launch_error(where, name, "a valid IPv6 address (or a DNS name without ':')",
                           example) from None


def check_slot_count(value, where: str) -> int:
    """Slots are whole numbers in [1, MAX_SLOTS]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS:
        raise launch_error(where, value, f"a whole number from 1 to {MAX_SLOTS} "
                           f"(the per-host cap)", "slots=8")
    return value


def parse_slots(text: str, where: str) -> int:
    """Parses the N of 'slots=N' or 'host:N': plain decimal digits only (no 1e9, no -1)."""
    if not _DIGITS.match(text):
        raise launch_error(where, text, f"a whole number from 1 to {MAX_SLOTS} written "
                           "with digits only", "slots=8")
    if len(text) > 9:  # over the cap anyway; no int() of a huge digit string
        raise launch_error(where, text, f"a whole number from 1 to {MAX_SLOTS} "
                           f"(the per-host cap)", "slots=8")
    return check_slot_count(int(text), where)


# ----------------------------------------------------------------------------- parsing

def _split_host_spec(spec: str, where: str) -> tuple[str, int | None]:
    """Splits 'host', 'host:N', '[v6]', '[v6]:N' or a bare IPv6 into (name, slots|None)."""
    if spec.startswith("["):
        match = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", spec)
        if not match:
            raise launch_error(where, spec, "an IPv6 address in brackets, optionally ':N'",
                               "[fe80::1]:4")
        name, slots = match.group(1), match.group(2)
        check_hostname(name, where)
        if ":" not in name:
            raise launch_error(where, spec, "brackets only around IPv6 addresses", "node01:4")
        return name, None if slots is None else parse_slots(slots, where)
    if spec.count(":") == 1:
        name, slots = spec.split(":")
        return check_hostname(name, where), parse_slots(slots, where)
    return check_hostname(spec, where), None


def _parse_fields(fields: list[str], slots: int | None, where: str):
    """Parses the 'slots=N max_slots=M' fields after the host name."""
    max_slots = None
    for field in fields:
        key, eq, value = field.partition("=")
        key = key.replace("-", "_")
        if not eq or key not in ("slots", "max_slots"):
            raise launch_error(where, field, "only 'slots=N' or 'max_slots=N' after the host",
                               _LINE_EXAMPLE)
        number = parse_slots(value, f"{where}: {key}")
        if key == "max_slots":
            max_slots = number
        elif slots is not None:
            raise launch_error(where, field, "slots given once (either 'host:N' or "
                               "'slots=N', not both)", "node01 slots=8")
        else:
            slots = number
    return (1 if slots is None else slots), max_slots


def parse_hostfile_line(line: str, where: str) -> Host | None:
    """Parses one line (already free of control characters); None for blank/comment."""
    content = line.split("#", 1)[0].strip()
    if not content:
        return None
    first, *fields = content.split()
    name, slots = _split_host_spec(first, where)
    slots, max_slots = _parse_fields(fields, slots, where)
    if max_slots is not None and max_slots < slots:
        raise launch_error(where, max_slots, f"max_slots >= slots ({slots})",
                           f"{name} slots={slots} max_slots={slots}")
    return Host(name, slots, max_slots)


def _check_chars(line: str, where: str) -> None:
    for char in line:
        if (ord(char) < 32 and char != "\t") or ord(char) == 127:
            raise launch_error(where, line, f"printable text; found control character "
                               f"{char!r}", _LINE_EXAMPLE)


class _Merger:
    """Collects hosts in first-seen order; a repeated host adds its slots.

    Summing follows OpenMPI, and makes `srun hostname > hosts` (one line per task)
    a valid hostfile.
    """

    def __init__(self):
        self.hosts: dict[str, Host] = {}

    def add(self, host: Host, where: str) -> None:
        old = self.hosts.get(host.name)
        if old is None:
            if len(self.hosts) >= MAX_HOSTS:
                raise launch_error(where, host.name, f"at most {MAX_HOSTS} distinct hosts",
                                   "split the job, or check the file was not concatenated")
            self.hosts[host.name] = host
            return
        slots = old.slots + host.slots
        check_slot_count(slots, f"{where}: total slots of repeated host {host.name!r}")
        max_slots = None
        if old.max_slots is not None or host.max_slots is not None:
            max_slots = max(slots, (old.max_slots or old.slots) + (host.max_slots or host.slots))
        self.hosts[host.name] = Host(host.name, slots, max_slots)

    def result(self, where: str) -> list[Host]:
        if not self.hosts:
            raise launch_error(where, "no hosts", "at least one host line", _LINE_EXAMPLE)
        return list(self.hosts.values())


def parse_hostfile_text(text: str, source: str = "<hostfile>") -> list[Host]:
    """Parses hostfile contents; errors name `source:line`."""
    # Split on '\n' only: str.splitlines() would also split on \v, \x1c, \u2028...,
    # silently turning a control character inside a name into a line break.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_LINES:
        raise launch_error(f"{source}:{MAX_LINES + 1}", f"{len(lines)} lines",
                           f"at most {MAX_LINES} lines", _LINE_EXAMPLE)
    merger = _Merger()
    for number, line in enumerate(lines, start=1):
        where = f"{source}:{number}"
        line = line[:-1] if line.endswith("\r") else line  # files written on Windows
        _check_chars(line, where)
        host = parse_hostfile_line(line, where)
        if host is not None:
            merger.add(host, where)
    return merger.result(source)


def parse_hostfile(path) -> list[Host]:
    """Reads and parses the hostfile at `path`; errors name `path:line`."""
    source = str(path)
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise launch_error(f"hostfile {source}", "a missing file", "an existing file",
                           "--hostfile hostfiles/localhost") from None
    except IsADirectoryError:
        raise launch_error(f"hostfile {source}", "a directory", "a file",
                           "--hostfile hostfiles/two_nodes") from None
    except OSError as err:
        raise launch_error(f"hostfile {source}", err.strerror, "a readable file",
                           "--hostfile hostfiles/localhost") from None
    if len(data) > MAX_FILE_BYTES:
        raise launch_error(f"hostfile {source}", f"more than {MAX_FILE_BYTES} bytes",
                           f"a file under {MAX_FILE_BYTES >> 20} MiB", _LINE_EXAMPLE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise launch_error(f"{source}:{line}", data[err.start:err.start + 4],
                           "UTF-8 text (host names are ASCII)", _LINE_EXAMPLE) from None
    return parse_hostfile_text(text, source)


def parse_hosts_arg(text: str, flag: str = "-H") -> list[Host]:
    """Parses 'h1:2,h2:2' (the -H form; ':N' optional, IPv6 as '[addr]:N')."""
    if not isinstance(text, str) or not text.strip():
        raise launch_error(flag, text, "a comma-separated host list", "-H node01:8,node02:8")
    entries = text.split(",")
    if len(entries) > MAX_LINES:
        raise launch_error(flag, f"{len(entries)} entries", f"at most {MAX_HOSTS} hosts",
                           "--hostfile for large jobs")
    merger = _Merger()
    for index, entry in enumerate(entries, start=1):
        where = f"{flag} entry {index}"
        _check_chars(entry, where)
        if not entry or entry != entry.strip() or " " in entry or "\t" in entry:
            raise launch_error(where, entry, "'host' or 'host:N' without spaces",
                               "-H node01:8,node02:8")
        name, slots = _split_host_spec(entry, where)
        merger.add(Host(name, 1 if slots is None else slots), where)
    return merger.result(flag)


# ----------------------------------------------------------------------------- formatting

def total_slots(hosts: list[Host]) -> int:
    return sum(host.slots for host in hosts)


def is_local_only(hosts: list[Host], local_names=LOCAL_NAMES) -> bool:
    """True when every host names this machine (so processes can be started directly)."""
    return all(host.name in local_names for host in hosts)


def _colon_list(hosts: list[Host], tool: str) -> str:
    for host in hosts:
        if host.is_ipv6:
            # horovodrun and the -H/-hosts flags split entries on ':', so an IPv6
            # address cannot be expressed there at all.
            raise launch_error(f"{tool} host list", host.name,
                               "a DNS name or IPv4 address (this tool cannot take IPv6 "
                               "in a host list)", "a name from /etc/hosts, or --hostfile with "
                               "mpirun")
    return ",".join(f"{host.name}:{host.slots}" for host in hosts)


def format_horovodrun_hosts(hosts: list[Host]) -> str:
    """'h1:2,h2:2' for horovodrun -H."""
    return _colon_list(hosts, "horovodrun -H")


def format_openmpi_hosts(hosts: list[Host]) -> str:
    """'h1:2,h2:2' for OpenMPI mpirun -H."""
    return _colon_list(hosts, "mpirun -H")


def format_mpich_hosts(hosts: list[Host]) -> str:
    """'h1:2,h2:2' for MPICH/Hydra mpiexec -hosts."""
    return _colon_list(hosts, "mpiexec -hosts")


def format_openmpi_hostfile(hosts: list[Host]) -> str:
    """OpenMPI (and horovodrun --hostfile) text: 'host slots=N' per line."""
    lines = []
    for host in hosts:
        line = f"{host.name} slots={host.slots}"
        if host.max_slots is not None:
            line += f" max_slots={host.max_slots}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def format_mpich_hostfile(hosts: list[Host]) -> str:
    """MPICH/Hydra machinefile text: 'host:N' per line."""
    return "\n".join(_colon_list([host], "mpiexec -f") for host in hosts) + "\n"

