"""Regenerates the flag tables of docs/flags.md from the config fields.

    python scripts/flags_doc.py

Everything above the marker line is `horovod_train.flags.markdown_reference()`; what
follows it is written by hand and kept. tests/unit/test_flags_doc.py fails when the
tables drift from the flags."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from horovod_train import flags  # noqa: E402  (after the path setup above)

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "flags.md")
MARKER = "<!-- Written by hand below this line; scripts/flags_doc.py keeps it. -->"


def render(existing: str) -> str:
    _head, found, tail = existing.partition(MARKER)
    return flags.markdown_reference().rstrip() + "\n\n" + MARKER + (tail if found else "\n")


def main() -> int:
    existing = open(DOC).read() if os.path.exists(DOC) else ""
    with open(DOC, "w") as out:
        out.write(render(existing))
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
