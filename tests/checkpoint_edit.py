"""Editing a written checkpoint's meta.json as an older or buggy writer, or a hand repair,
would leave it: the COMMIT marker's size and CRC-32 recomputed the way checkpoint_commit
writes them, so the commit check passes and only the values are wrong (issue 55)."""
import json
import os
import zlib


def recommit(path, edit) -> None:
    """Applies `edit(meta)` to the checkpoint directory `path`'s meta.json, in place, and
    makes its COMMIT marker list the new file's size and CRC-32."""
    meta_path, marker_path = os.path.join(path, "meta.json"), os.path.join(path, "COMMIT")
    with open(meta_path) as f:
        meta = json.load(f)
    edit(meta)
    text = json.dumps(meta, indent=2).encode()  # nan and inf as JSON's NaN and Infinity
    with open(meta_path, "wb") as f:
        f.write(text)
    with open(marker_path) as f:
        marker = json.load(f)
    marker["files"]["meta.json"] = {"size": len(text), "crc32": zlib.crc32(text)}
    with open(marker_path, "w") as f:
        json.dump(marker, f)
