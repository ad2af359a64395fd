"""Slurm host lists without scontrol. Standard library only.

Login nodes and test machines often lack `scontrol`, and a rank that must build
TF_CONFIG needs the node list in Slurm's own order. So the two compressed forms Slurm
puts in the environment are expanded here:

    SLURM_JOB_NODELIST   node[01-04,07],gpu-[1-2]  ->  node01 .. node04, node07, gpu-1, gpu-2
    SLURM_TASKS_PER_NODE 2(x3),1                   ->  [2, 2, 2, 1]

Zero padding follows Slurm: the width of a range's low bound ('01-10' gives '01'..'10').
Several bracket groups in one name expand as a product, leftmost varying slowest.
"""
import re

from launch.errors import launch_error
from launch.hostfile import MAX_HOSTS, Host, check_hostname, check_slot_count

_RANGE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9}))?$")
_TASKS = re.compile(r"^([0-9]{1,6})(?:\(x([0-9]{1,6})\))?$")
_NODELIST_EXAMPLE = "node[01-04,07],gpu-[1-2]"


def _split_top_level(text: str, where: str) -> list[str]:
    """Splits on commas that are outside brackets; checks brackets balance."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise launch_error(where, text, "no nested brackets", _NODELIST_EXAMPLE)
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise launch_error(where, text, "a ']' only after a '['", _NODELIST_EXAMPLE)
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth != 0:
        raise launch_error(where, text, "every '[' closed by ']'", _NODELIST_EXAMPLE)
    items.append(text[start:])
    return items


def _expand_ranges(body: str, where: str) -> list[str]:
    """'01-03,07' -> ['01', '02', '03', '07']."""
    values = []
    for part in body.split(","):
        match = _RANGE.match(part)
        if not match:
            raise launch_error(where, f"[{body}]", "ranges like 'a-b' or single numbers "
                               "inside brackets", _NODELIST_EXAMPLE)
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if low > high:
            raise launch_error(where, part, "a range whose start is not above its end",
                               "node[01-04]")
        if len(values) + high - low + 1 > MAX_HOSTS:
            raise launch_error(where, f"[{body}]", f"at most {MAX_HOSTS} hosts",
                               _NODELIST_EXAMPLE)
        width = len(low_text)
        values.extend(str(number).zfill(width) for number in range(low, high + 1))
    return values


def _expand_item(item: str, where: str) -> list[str]:
    """Expands one comma-free-at-top-level name such as 'rack[1-2]-n[01-02]'."""
    names = [""]
    for literal, body in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
        names = [name + literal for name in names]
        if body:
            suffixes = _expand_ranges(body, where)
            if len(names) * len(suffixes) > MAX_HOSTS:
                raise launch_error(where, item, f"at most {MAX_HOSTS} hosts",
                                   _NODELIST_EXAMPLE)
            names = [name + suffix for name in names for suffix in suffixes]
        elif body == "" and f"{literal}[]" in item:
            raise launch_error(where, item, "numbers inside brackets", _NODELIST_EXAMPLE)
    return names


def expand_nodelist(text: str, where: str = "SLURM_JOB_NODELIST") -> list[str]:
    """Expands a Slurm host list into names, in Slurm's order, without duplicates."""
    if not isinstance(text, str) or not text.strip():
        raise launch_error(where, text, "a Slurm node list", _NODELIST_EXAMPLE)
    names: dict[str, None] = {}
    for item in _split_top_level(text.strip(), where):
        if not item:
            raise launch_error(where, text, "no empty entries between commas",
                               _NODELIST_EXAMPLE)
        for name in _expand_item(item, where):
            names[check_hostname(name, where)] = None
            if len(names) > MAX_HOSTS:
                raise launch_error(where, text, f"at most {MAX_HOSTS} hosts",
                                   _NODELIST_EXAMPLE)
    return list(names)


def expand_tasks_per_node(text: str, where: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """'2(x3),1' -> [2, 2, 2, 1]."""
    if not isinstance(text, str) or not text.strip():
        raise launch_error(where, text, "counts like '8(x4)' or '2,1'", "2(x3),1")
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _TASKS.match(part)
        if not match:
            raise launch_error(where, part, "'N' or 'N(xR)' entries separated by commas",
                               "2(x3),1")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        check_slot_count(count, f"{where}: tasks per node")
        if repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise launch_error(where, part, f"a repeat from 1 to {MAX_HOSTS}", "8(x4)")
        counts.extend([count] * repeat)
    return counts


def hosts_from_slurm(nodelist: str, tasks_per_node: str) -> list[Host]:
    """Pairs the expanded node list with the expanded task counts."""
    names = expand_nodelist(nodelist)
    counts = expand_tasks_per_node(tasks_per_node)
    if len(counts) != len(names):
        raise launch_error("SLURM_TASKS_PER_NODE", tasks_per_node,
                           f"one count per node ({len(names)} nodes in {nodelist!r})",
                           f"{counts[0] if counts else 1}(x{len(names)})")
    return [Host(name, count) for name, count in zip(names, counts)]


def hosts_from_slurm_env(environ) -> list[Host]:
    """Hosts of the current Slurm job, read from its environment variables."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    tasks = environ.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not tasks:
        raise launch_error("SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE", None,
                           "both set, as inside a Slurm job (sbatch or salloc)",
                           "salloc -N 2 --ntasks-per-node 8, then run again")
    return hosts_from_slurm(nodelist, tasks)
