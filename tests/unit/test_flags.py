"""The flags are generated from the config fields: one flag per field, same name,
default, type and help; config_from_flags puts every flag's value on its own field.
(docs/flags.md, generated from the same fields, is checked by test_flags_doc.py.)"""
import dataclasses
import typing

import pytest
from absl import flags

from horovod_train import config as cfg
from horovod_train import flags as ht_flags

# What a field's type must become, written independently of flags.py's own table.
PARSERS = {bool: flags.BooleanParser, int: flags.IntegerParser, float: flags.FloatParser,
           str: flags.ArgumentParser, str | None: flags.ArgumentParser, tuple: flags.ListParser,
           float | None: flags.FloatParser}


def leaf_fields(root=cfg.RunConfig, path=()):
    """(path of attribute names, owner, field) for every non-section field."""
    hints = typing.get_type_hints(root)
    for field in dataclasses.fields(root):
        if dataclasses.is_dataclass(hints[field.name]):
            yield from leaf_fields(hints[field.name], path + (field.name,))
        else:
            yield path + (field.name,), root, field


LEAVES = list(leaf_fields())


def fresh_flags(*args) -> flags.FlagValues:
    """A private FlagValues with the generated flags, parsed from args (the global
    FLAGS stay untouched)."""
    fv = flags.FlagValues()
    ht_flags.define_flags(fv)
    fv(["horovod_train", *args])
    return fv


def test_one_flag_per_field_and_no_other():
    names = [path[-1] for path, _, _ in LEAVES]
    assert len(names) == len(set(names)), "two config fields share a flag name"
    assert set(fresh_flags()) == set(names)


@pytest.mark.parametrize("path, owner, field", LEAVES, ids=[p[-1] for p, _, _ in LEAVES])
def test_generated_flag_matches_its_field(path, owner, field):
    flag = fresh_flags()[field.name]
    kind = typing.get_type_hints(owner)[field.name]
    help_text = field.metadata.get("help")
    assert help_text and flag.help.endswith(help_text)
    choices = field.metadata.get("choices")
    if choices is not None:
        assert isinstance(flag, flags.EnumFlag) and flag.parser.enum_values == list(choices)
        assert flag.help.startswith("<" + "|".join(choices) + ">: ")
        assert field.default in choices
    else:
        assert type(flag.parser) is PARSERS[kind], (kind, type(flag.parser))
    expected_default = [str(v) for v in field.default] if kind is tuple else field.default
    assert flag.default == expected_default and flag.value == expected_default


def test_the_choice_lists_are_the_contracts():
    from launch import contract
    by_name = {field.name: field.metadata.get("choices") for _, _, field in LEAVES}
    assert by_name["backend"] == contract.BACKEND_CHOICES
    assert by_name["precision"] == contract.PRECISIONS
    assert by_name["compression"] == contract.COMPRESSIONS
    assert by_name["jit_compile"] == contract.JIT_MODES
    assert by_name["collective"] == contract.COLLECTIVES
    assert by_name["optimizer"] == contract.OPTIMIZERS
    assert by_name["progress"] == contract.PROGRESS_MODES


def test_model_and_dataset_choices_are_the_registries():
    import models
    from horovod_train.data import available_datasets
    by_name = {field.name: field.metadata.get("choices") for _, _, field in LEAVES}
    assert by_name["model"] == tuple(models.available_models())
    assert by_name["dataset"] == tuple(available_datasets())
    assert {"digits_cnn", "resnet50", "decoder_lm"} <= set(by_name["model"])


@pytest.mark.parametrize("flag, value, listed", [
    ("model", "resnet51", "resnet50"), ("dataset", "mnist", "synthetic")])
def test_a_bad_choice_is_one_line_with_the_fix(flag, value, listed):
    from horovod_train.errors import UsageError
    with pytest.raises(UsageError) as err:
        ht_flags.config_from_flags(fresh_flags(f"--{flag}={value}"))
    message = str(err.value)
    assert message.startswith(f"--{flag}: received {value!r}; expected one of: ")
    assert listed in message and f"pass --{flag}=<one of " in message
    assert "\n" not in message


def test_a_near_miss_choice_says_did_you_mean():
    from horovod_train.errors import UsageError
    with pytest.raises(UsageError) as err:
        ht_flags.config_from_flags(fresh_flags("--model=resnet51"))
    assert "Fix: did you mean --model=resnet50 or " in str(err.value)
    with pytest.raises(UsageError) as err:
        ht_flags.config_from_flags(fresh_flags("--backend=horovd"))
    assert "Fix: did you mean --backend=horovod? Else pass --backend=<one of " in str(err.value)


def test_defaults_build_the_default_config():
    assert ht_flags.config_from_flags(fresh_flags()) == cfg.RunConfig()


def _changed_value(field, kind, tmp_path):
    """A valid non-default command-line value for the field."""
    choices = field.metadata.get("choices")
    if choices is not None and field.name not in EXAMPLES:
        return [c for c in choices if c != field.default][-1]
    if kind is bool:
        return "false" if field.default else "true"
    if kind is int:
        return str(field.default + 1)
    if kind is float or kind == float | None:  # None: unset, the program decides
        return str(field.default / 2 if field.default else 1.5)
    examples = {**EXAMPLES, "data_dir": tmp_path, "checkpoint_dir": tmp_path,
                "run_dir": tmp_path, "summary_json": tmp_path / "s.json",
                "export_weights": tmp_path / "w.npz"}
    assert field.name in examples, f"add an example value for --{field.name} here"
    return str(examples[field.name])


# Values that need no other flag (the last --dataset choice would need --data_dir).
EXAMPLES = {"model": "digits_mlp", "dataset": "synthetic", "tfds_name": "mnist",
            "train_split": "train[:90%]", "eval_split": "validation", "cache": "memory",
            "checkpoint_every": "500", "inject_nonfinite": "5@1", "inject_delay": "eval:2@1",
            "profile_steps": "2,3", "profile_ranks": "0,1", "baseline_cache": "", "synthetic_shape": "4,4,3"}


NEEDS_RUN_DIR = ("profile_steps", "horovod_timeline")


@pytest.mark.parametrize("path, owner, field", LEAVES, ids=[p[-1] for p, _, _ in LEAVES])
def test_each_flag_reaches_its_own_field_and_only_it(path, owner, field, tmp_path):
    kind = typing.get_type_hints(owner)[field.name]
    args = [f"--{field.name}={_changed_value(field, kind, tmp_path)}"]
    if field.name in NEEDS_RUN_DIR:
        args.append(f"--run_dir={tmp_path}")
    fv = fresh_flags(*args)
    config = ht_flags.config_from_flags(fv)
    default = cfg.RunConfig()
    for other_path, _, other in LEAVES:
        got, base = config, default
        for name in other_path:
            got, base = getattr(got, name), getattr(base, name)
        if other.name == field.name:
            expected = tuple(int(v) for v in fv[field.name].value) if kind is tuple \
                else fv[field.name].value
            assert got == expected != base, (other_path, got)
        elif not (other.name == "run_dir" and field.name in NEEDS_RUN_DIR):
            assert got == base, f"--{field.name} changed {'.'.join(other_path)}"
