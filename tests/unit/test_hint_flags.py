"""A fix that names a flag of ours names one that exists: the hints of the backends' and
the Keras drop-in's errors (a flag renamed once, --timeline to --horovod_timeline, left two
hints pointing at nothing)."""
import ast
import re
from pathlib import Path

from horovod_train import flags

REPO = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"--(?:\[no\])?([a-z][a-z0-9_]*)")
# Other tools' flags these hints may name: srun's.
FOREIGN = {"distribution"}


def _flags_named(path: Path) -> set:
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named.update(FLAG.findall(node.value))
    return named


def test_hints_name_real_flags():
    ours = {field.name for _owner, field in flags.option_fields()}
    ours |= {f"no{name}" for name in ours}
    unknown = {}
    for folder in ("horovod_train/backends", "horovod_train/keras"):
        for path in sorted((REPO / folder).glob("*.py")):
            missing = _flags_named(path) - ours - FOREIGN
            if missing:
                unknown[str(path.relative_to(REPO))] = sorted(missing)
    assert not unknown, f"flags that do not exist: {unknown}; expected names from docs/flags.md"
