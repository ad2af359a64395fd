"""The command-line flags, generated from the config dataclasses, and the one
conversion back to a RunConfig.

Nothing here names an option: each flag is a field of horovod_train.config (its name
the field's name, its type the field's type, its default and help the field's), and
config_from_flags walks the same fields. A field whose type is a config dataclass is a
section (DataConfig, ...); every other field is a flag. Values are validated by the
dataclasses, not by absl, so that every bad value gets the same one-line
received/expected/fix message: fixed-choice fields become enum flags whose --help
lists the choices but whose parser leaves checking the value to the config.

The same fields make the flag reference, grouped under the headings a user looks for
(help_text for --help, markdown_reference for docs/flags.md); group_of is the one map
from a field to its heading.
"""
import dataclasses
import textwrap
import typing

from absl import flags

from horovod_train import config as cfg

_DEFINERS = {  # field type -> absl definer
    bool: flags.DEFINE_boolean,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    float | None: flags.DEFINE_float,  # None: unset, the program decides
    str: flags.DEFINE_string,
    str | None: flags.DEFINE_string,
    tuple: flags.DEFINE_list,  # "224,224,3"; the config parses the items
}


class _ConfigCheckedEnumParser(flags.EnumParser):
    """Takes any string: the config dataclass checks it against the same choices and
    says what was received, what was expected, and the fix (absl's own message has no
    fix and names the flag differently from every other bad value's)."""

    def parse(self, argument):
        return argument


class ChoiceFlag(flags.EnumFlag):
    """An enum flag (`<a|b|c>: help` in --help, enum_values in --helpxml) checked by the
    config instead of by absl."""

    def __init__(self, name, default, help, enum_values):  # noqa: A002 - absl's word
        super().__init__(name, default, help, enum_values)
        self.parser = _ConfigCheckedEnumParser(enum_values)


def is_section(field: dataclasses.Field, owner) -> bool:
    return dataclasses.is_dataclass(_field_type(field, owner))


def _field_type(field: dataclasses.Field, owner):
    return typing.get_type_hints(owner)[field.name]


def option_fields(root=cfg.RunConfig):
    """(owner dataclass, field) for every flag-backed field under `root`, depth first in
    declaration order."""
    for field in dataclasses.fields(root):
        if is_section(field, root):
            yield from option_fields(_field_type(field, root))
        else:
            yield root, field


def _define(owner, field: dataclasses.Field, flag_values) -> None:
    help_text = field.metadata.get("help")
    if not help_text:
        raise TypeError(f"{owner.__name__}.{field.name}: a flag needs help; declare it with "
                        f"config.option(default, help)")
    choices = field.metadata.get("choices")
    if choices is not None:
        flags.DEFINE_flag(ChoiceFlag(field.name, field.default, help_text, choices), flag_values)
        return
    kind = _field_type(field, owner)
    if kind not in _DEFINERS:
        raise TypeError(f"{owner.__name__}.{field.name}: no flag type for {kind!r}; "
                        f"use one of {sorted(map(str, _DEFINERS))}")
    default = field.default
    if kind is tuple:
        default = [str(item) for item in default]
    _DEFINERS[kind](field.name, default, help_text, flag_values=flag_values)


def define_flags(flag_values=flags.FLAGS) -> None:
    """Defines one flag per config field (in the process-wide FLAGS unless told)."""
    seen = {}
    for owner, field in option_fields():
        if field.name in seen:
            raise TypeError(f"--{field.name} is both {seen[field.name]}.{field.name} and "
                            f"{owner.__name__}.{field.name}: rename one of the fields")
        seen[field.name] = owner.__name__
        _define(owner, field, flag_values)


def define_flags_once(flag_values=flags.FLAGS) -> None:
    """define_flags, unless an earlier call in this process did (the front door run twice
    in one process: a notebook, a test's rank session)."""
    _, first = next(option_fields())
    if first.name not in flag_values:
        define_flags(flag_values)


def _build(owner, fv):
    values = {}
    for field in dataclasses.fields(owner):
        if is_section(field, owner):
            values[field.name] = _build(_field_type(field, owner), fv)
        else:
            values[field.name] = getattr(fv, field.name)
    return owner(**values)


def config_from_flags(fv) -> cfg.RunConfig:
    """fv: parsed absl FlagValues. Raises UsageError on bad values."""
    return _build(cfg.RunConfig, fv)


# ---- the reference: --help and docs/flags.md ------------------------------------------

# The headings, in --help's order, each with what its flags are for.
GROUPS = {
    "model": "what is trained, and how: the model, optimizer, schedule and results",
    "data": "the input pipeline",
    "speed": "throughput and memory: precision, accumulation, XLA, threads, Horovod's fusion",
    "launch": "how the ranks find and talk to each other",
    "observe": "what the chief records: logs, metrics, profiles, summaries",
    "faults": "checkpoints, timeouts, stopping, elastic training and fault injection",
}
# A flag sits under its section's heading unless _FIELD_GROUPS names it: the sections
# follow the code, the headings what a user came to change.
_SECTION_GROUPS = {"RunConfig": "model", "OptimConfig": "model", "TrainConfig": "model",
                   "DataConfig": "data", "SpeedConfig": "speed", "RuntimeConfig": "launch",
                   "ObserveConfig": "observe"}
_FIELD_GROUPS = {
    "log_every": "observe", "summary_json": "observe",
    "seed": "model", "deterministic": "model",
    "intra_op_threads": "speed", "inter_op_threads": "speed",
    "fusion_threshold_mb": "speed", "cycle_time_ms": "speed",
    "hierarchical_allreduce": "speed",
    **dict.fromkeys(("checkpoint_dir", "checkpoint_every", "keep_checkpoints",
                     "checkpoint_timeout_s", "divergence_check_steps", "max_nonfinite_steps",
                     "inject_nonfinite", "collective_timeout_s", "stop_grace_s", "elastic",
                     "elastic_commit_every", "inject_delay"), "faults"),
}


def group_of(owner, field: dataclasses.Field) -> str:
    return _FIELD_GROUPS.get(field.name) or _SECTION_GROUPS[owner.__name__]


@dataclasses.dataclass(frozen=True)
class FlagDoc:
    """One flag as the reference shows it."""
    name: str            # "--[no]scale_lr" for a boolean, else "--batch_size"
    default: str | None  # as typed on the command line; None: not set
    choices: tuple       # () unless fixed-choice
    help: str            # noqa: A003 - the field's help text


def _default_text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return "''" if value == "" else str(value)


def reference() -> dict[str, list[FlagDoc]]:
    """heading -> its flags in declaration order, for every heading of GROUPS."""
    grouped = {group: [] for group in GROUPS}
    for owner, field in option_fields():
        boolean = _field_type(field, owner) is bool
        grouped[group_of(owner, field)].append(FlagDoc(
            f"--[no]{field.name}" if boolean else f"--{field.name}",
            None if field.default is None else _default_text(field.default), tuple(field.metadata.get("choices") or ()),
            field.metadata["help"]))
    return grouped


_USAGE = """\
USAGE: horovod_train train [flags]   (also: horovod_train [flags], python -m horovod_train [flags])
       horovod_train --help         every subcommand: train, plan, data, report, launch

Flags take dashes or underscores alike (--batch-size=64 is --batch_size=64); a boolean
--x is switched off with --nox. --helpfull adds absl's own flags (logging, debugging).
"""


def _or_not_set(default: str | None) -> str:
    return "not set" if default is None else default


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=88, initial_indent=indent, subsequent_indent=indent)


def help_text() -> str:
    """--help: every flag of ours under its heading, with its default, choices and help."""
    lines = [_USAGE]
    for group, docs in reference().items():
        lines.append(f"{group}: {GROUPS[group]}")
        for doc in docs:
            lines.append(f"  {doc.name} (default: {_or_not_set(doc.default)})")
            lines += _wrapped(doc.help, "      ")
            if doc.choices:
                lines += _wrapped("one of: " + ", ".join(doc.choices), "      ")
        lines.append("")
    return "\n".join(lines)


def absl_help(flag_values=flags.FLAGS) -> str:
    """absl's own flags (every module's but ours, then --flagfile and --undefok), as absl
    renders them: the rest of --helpfull."""
    ours = {field.name for _, field in option_fields()}
    by_module = flag_values.flags_by_module_dict()
    parts = [flag_values.module_help(module) for module in sorted(by_module)
             if any(flag.name not in ours for flag in by_module[module])]
    special = flags.FlagValues().get_help()  # an empty FlagValues lists just those two
    parts.append("\nabsl.flags:\n" + textwrap.indent(special, "  "))
    return "absl's own flags:\n" + "\n".join(parts) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_reference() -> str:
    """The flag reference as Markdown (docs/flags.md): per heading, a table of flag,
    default, choices and help."""
    out = ["# Flags of `python -m horovod_train`", "",
           "Generated by `horovod_train.flags.markdown_reference()` from the config fields; "
           "dashes and underscores in a name are alike.", ""]
    for group, docs in reference().items():
        out += [f"## {group}", "", GROUPS[group][0].upper() + GROUPS[group][1:] + ".", "",
                "| flag | default | choices | help |", "| --- | --- | --- | --- |"]
        for doc in docs:
            choices = ", ".join(f"`{choice}`" for choice in doc.choices)
            default = "not set" if doc.default is None else f"`{_cell(doc.default)}`"
            out.append(f"| `{doc.name}` | {default} | {choices} | "
                       f"{_cell(doc.help)} |")
        out.append("")
    return "\n".join(out)
