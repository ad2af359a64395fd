"""Generated blocks inside a page written by hand: each `<!-- begin NAME -->` ...
`<!-- end NAME -->` block is rewritten, the text around it is kept. Used by
scripts/test_profile.py (docs/testing.md) and bench/report_doc.py (docs/benchmarks.md)."""


def fill(doc: str, bodies: dict, path: str, owner: str) -> str:
    """`doc` with each named block's body replaced; SystemExit naming a missing marker.
    `path` is the page (for the message), `owner` the list of blocks that names it."""
    for name, body in bodies.items():
        begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
        head, found, rest = doc.partition(begin)
        if not found:
            raise SystemExit(f"{path}: no '{begin}' marker; expected one per block of {owner}. "
                             f"Fix: put the markers where the table goes, or take {name!r} "
                             f"out of {owner}")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"{path}: '{begin}' has no '{end}'. Fix: close the block")
        doc = f"{head}{begin}\n{body}\n{end}{tail}"
    return doc
