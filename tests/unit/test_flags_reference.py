"""The flag reference (--help and docs/flags.md) is made from the config fields: every
flag under exactly one heading, with its default, choices and help."""
import re

from horovod_train import config as cfg
from horovod_train import flags as ht_flags

HEADINGS = ["model", "data", "speed", "launch", "observe", "faults"]


def fields():
    return list(ht_flags.option_fields())


def test_every_flag_has_one_of_the_headings_and_no_heading_is_empty():
    assert list(ht_flags.GROUPS) == HEADINGS
    grouped = ht_flags.reference()
    assert list(grouped) == HEADINGS and all(grouped[h] for h in HEADINGS)
    shown = [doc.name.replace("[no]", "") for docs in grouped.values() for doc in docs]
    assert sorted(shown) == sorted(f"--{field.name}" for _, field in fields())


def test_the_exceptions_name_real_flags():
    names = {field.name for _, field in fields()}
    assert set(ht_flags._FIELD_GROUPS) <= names
    assert set(ht_flags._FIELD_GROUPS.values()) <= set(HEADINGS)
    assert set(ht_flags._SECTION_GROUPS.values()) <= set(HEADINGS)


def test_a_few_flags_sit_where_a_user_looks():
    where = {field.name: ht_flags.group_of(owner, field) for owner, field in fields()}
    assert where["model"] == where["optimizer"] == where["epochs"] == "model"
    assert where["dataset"] == where["batch_size"] == "data"
    assert where["precision"] == where["fusion_threshold_mb"] == "speed"
    assert where["intra_op_threads"] == "speed"
    assert where["backend"] == where["mwms_port_base"] == "launch"
    assert where["run_dir"] == where["log_every"] == "observe"
    assert where["checkpoint_dir"] == where["elastic"] == where["inject_nonfinite"] == "faults"


def table_rows(markdown: str) -> dict[str, list[list[str]]]:
    """heading -> the cells of each row of its table (escaped pipes kept inside a cell)."""
    rows, heading = {}, None
    for line in markdown.splitlines():
        if line.startswith("## "):
            heading = line[3:]
            rows[heading] = []
        elif line.startswith("| `--"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[heading].append(cells)
    return rows


def test_markdown_reference_has_a_table_per_heading_with_every_flag_once():
    text = ht_flags.markdown_reference()
    rows = table_rows(text)
    assert list(rows) == HEADINGS
    assert text.count("| flag | default | choices | help |") == len(HEADINGS)
    names = [cells[0].strip("`").replace("[no]", "") for r in rows.values() for cells in r]
    assert sorted(names) == sorted(f"--{field.name}" for _, field in fields())
    assert all(len(cells) == 4 for r in rows.values() for cells in r)


def test_markdown_rows_carry_default_choices_and_help():
    rows = {cells[0]: cells for r in table_rows(ht_flags.markdown_reference()).values()
            for cells in r}
    model = rows["`--model`"]
    assert model[1] == "`digits_cnn`" and "`resnet50`" in model[2]
    assert model[3] == cfg.RunConfig.__dataclass_fields__["model"].metadata["help"]
    assert rows["`--[no]scale_lr`"][1:3] == ["`true`", ""]
    assert rows["`--checkpoint_dir`"][1] == "not set"
    assert rows["`--synthetic_shape`"][1] == "`8,8,1`"
    assert rows["`--cache`"][1] == "`''`"
    assert rows["`--precision`"][2] == "`fp32`, `mixed_float16`, `mixed_bfloat16`"


def test_a_pipe_in_help_text_cannot_break_the_table():
    assert ht_flags._cell("a | b\nc") == "a \\| b c"
