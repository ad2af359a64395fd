"""docs/flags.md's tables are the flags as they are (scripts/flags_doc.py writes them)."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("flags_doc", REPO / "scripts/flags_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_flags_md_is_current():
    doc = (REPO / "docs/flags.md").read_text()
    assert _script().render(doc) == doc, "docs/flags.md is stale: run python scripts/flags_doc.py"


def test_every_flag_is_in_the_doc():
    from horovod_train import flags
    doc = (REPO / "docs/flags.md").read_text()
    missing = [field.name for _owner, field in flags.option_fields() if f"--{field.name}`" not in doc
               and f"--[no]{field.name}`" not in doc]
    assert not missing, missing
