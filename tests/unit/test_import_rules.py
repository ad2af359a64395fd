"""The layering rules of docs/design.md, checked on the source's syntax trees (no import
of TensorFlow, Horovod or the code under test).

- Horovod is imported only in horovod_train/backends/horovod*.py.
- launch/ imports no TensorFlow (nor Keras), no Horovod and nothing of horovod_train.
- models/ imports nothing of horovod_train, no Horovod and no tf.distribute.
- MWMS-only APIs (MultiWorkerMirroredStrategy, the raw collective ops,
  CommunicationImplementation/Options) appear only in horovod_train/backends/mwms.py.
- Nothing in horovod_train compares a value with a backend's name outside backends/:
  the rest of the package asks a backend for a capability.
- Nothing imports or reaches a private name (a leading underscore) of another package
  (another top-level package, or another subpackage of horovod_train).
- horovod_train's modules import one another without a cycle, imports inside functions
  included: a deferred import that closes a circle only hides it (two modules that need
  each other are one module, or share a third).

The checker runs on the real tree, and on a planted tree that breaks every rule once.
"""
import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

from launch import contract

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("horovod_train", "launch", "models", "bench", "scripts", "examples")
TF_MODULES = ("tensorflow", "keras", "tf_keras")
MWMS_APIS = frozenset({"MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy",
                       "CommunicationImplementation", "CommunicationOptions",
                       "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3",
                       "CollectiveGather", "CollectiveGatherV2", "CollectiveBcastSendV2",
                       "CollectiveBcastRecvV2", "CollectiveInitializeCommunicator"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _top(module: str) -> str:
    return module.split(".")[0]


def _is_horovod(module: str) -> bool:
    return module == "horovod" or module.startswith("horovod.")


class Module:
    """One source file: its dotted name, its package, and its syntax tree."""

    def __init__(self, root: pathlib.Path, path: pathlib.Path):
        self.rel = path.relative_to(root).as_posix()
        parts = list(path.relative_to(root).with_suffix("").parts)
        self.is_package = parts[-1] == "__init__"
        if self.is_package:
            parts = parts[:-1]
        self.name = ".".join(parts)
        self.package = self.name if self.is_package else ".".join(parts[:-1])
        self.tree = ast.parse(path.read_text(), filename=self.rel)

    def resolve(self, node: ast.ImportFrom) -> str:
        """The absolute module an ImportFrom names (relative imports resolved)."""
        if not node.level:
            return node.module or ""
        base = self.package.split(".")
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def imports(self):
        """(line, [modules]) per import statement, dynamic imports included; a `from m
        import a` lists m and m.a (`from tensorflow import distribute` names both)."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                yield node.lineno, [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = self.resolve(node)
                yield node.lineno, [module] + [f"{module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call) and _call_name(node) in (
                    "import_module", "__import__") and node.args \
                    and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                yield node.lineno, [node.args[0].value]

    def imported(self, refused):
        """(line, first module refused(module) holds) per import statement that has one."""
        for line, names in self.imports():
            hit = next((n for n in names if refused(n)), None)
            if hit is not None:
                yield line, hit


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _package_of(module: str, modules: dict) -> str:
    """The package a dotted module belongs to (itself when it is a package)."""
    if module in modules:
        return modules[module].package
    return module.rpartition(".")[0]


def _owner(module: str, modules: dict) -> str:
    """What counts as one package for privacy: horovod_train's subpackages apart, and
    each other top-level package as a whole."""
    package = _package_of(module, modules)
    parts = package.split(".")
    return ".".join(parts[:2]) if parts[0] == "horovod_train" else parts[0]


# ---- the rules ----------------------------------------------------------------------
def _rule_horovod(mod: Module, modules) -> list[str]:
    allowed = mod.rel.startswith("horovod_train/backends/horovod")
    if allowed or _top(mod.name) not in ("horovod_train", "launch", "models"):
        return []
    return [f"{mod.rel}:{line}: imports Horovod ({name}); only horovod_train/backends/"
            f"horovod*.py may" for line, name in mod.imported(_is_horovod)]


def _rule_launch(mod: Module, modules) -> list[str]:
    if _top(mod.name) != "launch":
        return []
    refused = lambda n: _top(n) in TF_MODULES + ("horovod_train",) or _is_horovod(n)  # noqa: E731
    return [f"{mod.rel}:{line}: launch/ imports {name} (it must import no TensorFlow, "
            f"Horovod or horovod_train)" for line, name in mod.imported(refused)]


def _rule_models(mod: Module, modules) -> list[str]:
    if _top(mod.name) != "models":
        return []
    refused = lambda n: (_top(n) == "horovod_train" or _is_horovod(n)  # noqa: E731
                         or n.startswith(("tensorflow.distribute", "tensorflow.python.distribute")))
    found = [f"{mod.rel}:{line}: models/ imports {name} (it must import nothing of "
             f"horovod_train, no Horovod, no tf.distribute)"
             for line, name in mod.imported(refused)]
    found += [f"{mod.rel}:{node.lineno}: models/ uses tf.distribute"
              for node in ast.walk(mod.tree)
              if isinstance(node, ast.Attribute) and node.attr == "distribute"]
    return found


MWMS_MODULES = ("horovod_train/backends/mwms.py", "horovod_train/backends/mwms_comm.py")


def _rule_mwms_apis(mod: Module, modules) -> list[str]:
    # mwms.py and its communicator (mwms_comm.py): the MWMS backend.
    if mod.rel in MWMS_MODULES or _top(mod.name) == "tests":
        return []
    found = []
    for node in ast.walk(mod.tree):
        name = node.attr if isinstance(node, ast.Attribute) else (
            node.id if isinstance(node, ast.Name) else None)
        if name in MWMS_APIS:
            found.append(f"{mod.rel}:{node.lineno}: uses {name}; MWMS collectives and "
                         f"strategies live only in the mwms backend's modules")
        if isinstance(node, ast.ImportFrom):
            found += [f"{mod.rel}:{node.lineno}: imports {a.name}; MWMS APIs live only in "
                      f"horovod_train/backends/mwms.py" for a in node.names if a.name in MWMS_APIS]
    return found


def _names_a_backend(node: ast.AST) -> bool:
    """A string constant that is a backend's name, or a collection holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in contract.BACKENDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_backend(e) for e in node.elts)
    return False


def _is_string_constant(node: ast.AST) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_string_constant(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _holds_a_backend_name(node: ast.AST) -> bool:
    """backend_name, x.backend_name, x.backend (a name), backend.name, self.backend.name."""
    if isinstance(node, ast.Name):
        return node.id == "backend_name"
    if isinstance(node, ast.Attribute):
        if node.attr == "backend_name":
            return True
        if node.attr == "name":
            inner = node.value
            holder = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
            return "backend" in holder
    return False


def _rule_backend_names(mod: Module, modules) -> list[str]:
    if _top(mod.name) != "horovod_train" or mod.name.startswith("horovod_train.backends"):
        return []
    found = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Compare):
            operands = [node.left] + list(node.comparators)
            if any(map(_names_a_backend, operands)) or (
                    any(map(_holds_a_backend_name, operands))
                    and any(map(_is_string_constant, operands))):
                found.append(f"{mod.rel}:{node.lineno}: compares with a backend's name "
                             f"({ast.unparse(node)}); ask the backend for a capability")
    return found


def _module_aliases(mod: Module, modules) -> dict[str, str]:
    """Local names this file binds to modules of the tree (import x.y as z, from x import y)."""
    aliases = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = mod.resolve(node)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def _rule_private(mod: Module, modules) -> list[str]:
    if _top(mod.name) == "tests":
        return []
    mine, found = _owner(mod.name, modules), []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ImportFrom):
            source = mod.resolve(node)
            private = [a.name for a in node.names if _is_private(a.name)]
            if any(_is_private(p) for p in source.split(".")):
                private.append(source)
            if private and _top(source) in PACKAGES and _owner(source, modules) != mine:
                found.append(f"{mod.rel}:{node.lineno}: imports private {', '.join(private)} "
                             f"from {source} (another package)")
    for name, target in _module_aliases(mod, modules).items():
        if _owner(target, modules) == mine:
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == name and _is_private(node.attr):
                found.append(f"{mod.rel}:{node.lineno}: uses private {target}.{node.attr} "
                             f"(another package)")
    return found


def _imported_modules(mod: Module, modules) -> list[tuple[int, str]]:
    """(line, module) per horovod_train module `mod` imports, anywhere in it: for `from
    m import a`, m.a when that is a module, else m."""
    found = []
    for line, names in mod.imports():
        known = [n for n in names if n in modules and _top(n) == "horovod_train"]
        deepest = [n for n in known if not any(o.startswith(n + ".") for o in known)]
        found += [(line, n) for n in deepest]
    return found


def _rule_no_cycles(mod: Module, modules) -> list[str]:
    if _top(mod.name) != "horovod_train":
        return []
    for line, first in _imported_modules(mod, modules):
        path, seen = [first], set()
        while path:  # depth-first from `first`: does it lead back to mod?
            name = path.pop()
            if name == mod.name:
                return [f"{mod.rel}:{line}: imports {first}, which imports {mod.name} back "
                        f"(an import cycle)"]
            if name not in seen:
                seen.add(name)
                path.extend(n for _, n in _imported_modules(modules[name], modules))
    return []


RULES = (_rule_horovod, _rule_launch, _rule_models, _rule_mwms_apis, _rule_backend_names,
         _rule_private, _rule_no_cycles)


def _modules(root: pathlib.Path) -> dict:
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                mod = Module(root, path)
                modules[mod.name] = mod
    return modules


def check_tree(root: pathlib.Path) -> list[str]:
    """Every violation of the rules under `root`, as 'path:line: what'."""
    modules = _modules(root)
    return [v for mod in modules.values() for rule in RULES for v in rule(mod, modules)]


# ---- the tests ---------------------------------------------------------------------
PLANTED = {
    "horovod_train/__init__.py": "",
    "horovod_train/loop.py": """
        import horovod.tensorflow as hvd
        from horovod_train import data
        from horovod_train.data.sharding import _split
        def f(backend, name):
            if backend.name == "mwms" or name in ("local", "horovod"):
                return data._secret
            return tf.distribute.MultiWorkerMirroredStrategy()
        """,
    "horovod_train/data/__init__.py": "",
    "horovod_train/data/sharding.py": "_split = 1\n",
    "horovod_train/data/pipeline.py": "from ._helpers import x\nfrom .sharding import _split\n",
    "horovod_train/data/_helpers.py": "x = 1\n",
    "horovod_train/data/ring_a.py": "from horovod_train.data import ring_b\n",
    "horovod_train/data/ring_b.py": "def f():\n    from horovod_train.data.ring_a import g\n",
    "horovod_train/backends/__init__.py": "def resolve(name):\n    return name == 'mwms'\n",
    "horovod_train/backends/horovod.py": "import horovod.tensorflow as hvd\n",
    "horovod_train/backends/mwms.py": "import tensorflow as tf\ntf.raw_ops.CollectiveReduceV2\n",
    "horovod_train/keras.py": """
        import tensorflow as tf
        op = tf.raw_ops.CollectiveReduceV2
        def same(current, name):
            return current.backend_name == name  # two names: allowed
        def tpu(self):
            return self.backend_name != "tpu"  # a name by its holder, even one not listed
        """,
    "launch/__init__.py": "",
    "launch/spec.py": "import tensorflow\nfrom horovod_train.env import launch_info\n",
    "launch/cli.py": "import importlib\nimportlib.import_module('horovod.tensorflow')\n",
    "models/__init__.py": "",
    "models/zoo.py": "from horovod_train import config\nimport tensorflow as tf\n"
                     "s = tf.distribute\n",
    "bench/__init__.py": "",
    "bench/run.py": "from horovod_train import loop\nloop._Trainer\n",
}
EXPECTED = [  # (file, what) each planted violation must be reported as
    ("horovod_train/loop.py:1", "imports Horovod"),
    ("horovod_train/loop.py:3", "imports private _split"),
    ("horovod_train/loop.py:5", "compares with a backend's name (backend.name == 'mwms')"),
    ("horovod_train/loop.py:5", "(name in ('local', 'horovod'))"),
    ("horovod_train/loop.py:6", "uses private horovod_train.data._secret"),
    ("horovod_train/loop.py:7", "uses MultiWorkerMirroredStrategy"),
    ("horovod_train/keras.py:2", "uses CollectiveReduceV2"),
    ("horovod_train/keras.py:6", "(self.backend_name != 'tpu')"),
    ("launch/spec.py:1", "launch/ imports tensorflow"),
    ("launch/spec.py:2", "launch/ imports horovod_train.env"),
    ("launch/cli.py:2", "imports Horovod (horovod.tensorflow)"),
    ("launch/cli.py:2", "launch/ imports horovod.tensorflow"),
    ("models/zoo.py:1", "models/ imports horovod_train"),
    ("models/zoo.py:3", "models/ uses tf.distribute"),
    ("bench/run.py:2", "uses private horovod_train.loop._Trainer"),
    ("horovod_train/data/ring_a.py:1", "imports horovod_train.data.ring_b, which imports "
                                       "horovod_train.data.ring_a back"),
    ("horovod_train/data/ring_b.py:2", "imports horovod_train.data.ring_a, which imports"),
]


def _plant(root: pathlib.Path) -> None:
    for rel, text in PLANTED.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def test_checker_catches_every_planted_violation(tmp_path):
    _plant(tmp_path)
    found = check_tree(tmp_path)
    for where, what in EXPECTED:
        assert any(v.startswith(where + ":") and what in v for v in found), \
            f"planted {what!r} at {where} not caught; found:\n" + "\n".join(found)


def test_checker_allows_what_the_rules_allow(tmp_path):
    """Horovod in backends/horovod.py, a raw collective in backends/mwms.py, name
    comparisons inside backends/, private names inside their own package."""
    _plant(tmp_path)
    found = check_tree(tmp_path)
    allowed = ("horovod_train/backends/", "horovod_train/data/pipeline.py")
    assert [v for v in found if v.startswith(allowed)] == []
    assert len(found) == len(EXPECTED), "\n".join(found)


def test_checker_needs_no_tensorflow():
    """It reads syntax only: checking the real tree imports neither TF nor the package."""
    code = ("import runpy, sys; ns = runpy.run_path(sys.argv[1]); ns['check_tree'](ns['ROOT']); "
            "print(sorted(m for m in ('tensorflow', 'horovod', 'horovod_train') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, __file__], capture_output=True,
                         text=True, timeout=120, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__.removeprefix("_rule_"))
def test_real_tree_follows_the_rule(rule):
    modules = _modules(ROOT)
    found = [v for mod in modules.values() for v in rule(mod, modules)]
    assert found == [], "\n".join(found)
