"""One line for a crash caused by damaged data. TF-free.

Under --noverify_data nothing reads the records before step 1, so a damaged shard
surfaces inside the compiled step as a TensorFlow error whose text names an op, not
the file, followed by pages of traceback. describe_data_error recognises such errors
by class name and message only: importing TensorFlow here would slow every CLI start,
and the caller may be handling an error from a process that never loaded TF.
"""
import re

from launch.redact import redact  # stdlib only

# Bytes TF cannot read (bad checksum, short file); a damaged checkpoint raises it too,
# so it counts as data only from the input pipeline or with a record-reader message.
_LOSS = "DataLossError"
# Classes that input damage arrives as: decode/parse failures, and py_function
# (the LMDB reader) errors, which TF re-raises as InvalidArgument or Unknown.
_MAYBE_DATA = ("InvalidArgumentError", "UnknownError")
# Messages that only damaged records produce, wherever the op ran.
_DAMAGE = re.compile(
    r"corrupted record|truncated record|Read less bytes than requested|"
    r"Unknown image file format|Invalid (?:PNG|JPEG|GIF|BMP|WebP) data|"
    r"Could not parse example input|Can't parse serialized Example|"
    r"is required but could not be found|MDB_[A-Z_]+|LMDB environment|"
    r"Received a label value of")
# Shape failures are data only when the input pipeline raised them (our decoder's
# reshape / ensure_shape); the same words from the model are a model bug.
_SHAPE = re.compile(r"Input to reshape is a tensor with|is not compatible with expected shape")
_PIPELINE = re.compile(r"IteratorGetNext|Dataset|Iterator::")
_FILE = re.compile(r"LMDB environment (\S+?):|(\S+\.(?:tfrecords?|mdb|lmdb))\b")
_MAX_SHORT = 200  # characters of TF's message kept in the line


def short_message(text: str, match: str | None = None) -> str:
    """TF's message on one line: the line holding `match` (else the first), without the
    function-node prefix, the tf.data wrapper, the node list or the [Op:...] tail."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = next((ln for ln in lines if match and match in ln), lines[0] if lines else "")
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", line)
    line = re.sub(r"^.*?transformation with iterator: [\w:]+: ", "", line)
    line = re.sub(r"\s*\[\[.*?\]\]", "", line)
    line = re.sub(r"\s*\[Op:[^\]]*\].*", "", line).strip()
    line = re.sub(r"^\w+Error: (?=LMDB environment)", "", line)  # py_function's prefix
    line = redact(line)  # before the cut: a URL cut before its '@' is no URL any more
    return line if len(line) <= _MAX_SHORT else line[:_MAX_SHORT - 3] + "..."


def _chain(err: BaseException, limit: int = 8):
    """err and the errors it was raised from (a caller may have wrapped the TF error)."""
    seen = []
    while err is not None and len(seen) < limit and all(err is not s for s in seen):
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _damage_match(err: BaseException) -> str | None:
    """The text that marks `err` as damaged input ("" if its class alone does), else None."""
    name, module = type(err).__name__, type(err).__module__ or ""
    text = str(err)
    found = _DAMAGE.search(text)
    if module.split(".")[0] == "lmdb":
        return found.group(0) if found else ""
    if name == _LOSS and (found or _PIPELINE.search(text)):
        return found.group(0) if found else ""
    if name not in _MAYBE_DATA:
        return None
    if found:
        return found.group(0)
    shape = _SHAPE.search(text)
    return shape.group(0) if shape and _PIPELINE.search(text) else None


def describe_data_error(err: BaseException, data_dir: str | None = None) -> str | None:
    """One line naming damaged input data, or None when `err` is not about the data.

    `data_dir` (the run's --data_dir) goes into the suggested verify command and names
    the place when the message does not hold a file name (TFRecord errors never do)."""
    for cause in _chain(err):
        match = _damage_match(cause)
        if match is not None:
            return _line(str(cause), match, data_dir)
    return None


def _line(text: str, match: str, data_dir: str | None) -> str:
    found = _FILE.search(text)
    if found:
        where = found.group(1) or found.group(2)
    else:
        where = f"a file under {data_dir}" if data_dir else "a data file"
    verify = f"python -m horovod_train.data verify --data_dir={data_dir or '<your --data_dir>'}"
    return (f"data: {where} is damaged (received: {short_message(text, match)}); expected "
            "records that read and decode as dataset.json describes. Fix: run "
            f"`{verify}` to find the file and record index, then restore or re-convert "
            "it; or drop --noverify_data and pass --skip_corrupt to skip (and count) "
            "damaged records")
