"""The command-line flags, generated from the config dataclasses, and the one
conversion back to a RunConfig.

Nothing here names an option: each flag is a field of horovod_train.config (its name
the field's name, its type the field's type, its default and help the field's), and
config_from_flags walks the same fields. A field whose type is a config dataclass is a
section (DataConfig, ...); every other field is a flag. Values are validated by the
dataclasses, not by absl, so that every bad value gets the same one-line
received/expected/fix message: fixed-choice fields become enum flags whose --help
lists the choices but whose parser leaves checking the value to the config.
"""
import dataclasses
import typing

from absl import flags

from horovod_train import config as cfg

_DEFINERS = {  # field type -> absl definer
    bool: flags.DEFINE_boolean,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
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
