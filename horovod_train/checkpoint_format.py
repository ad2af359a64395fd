"""What a checkpoint's state.npz holds, and how its arrays are named and checked.

meta.json's "format" says which layout a checkpoint has:

- 1 (no "format" field; written before the names) keys the arrays by position, v00000,
  v00001, ... and lists no names. It still loads, by position, checked by its count and
  shapes alone, as it always was.
- 2 stores each array under its variable's name (state_names) and lists the names in
  order. A model whose names differ is refused at the first difference (check_names):
  by position alone, two same-shaped layers that swap places restore silently into each
  other's.
"""
import itertools
import re
import zipfile

import numpy as np

from horovod_train.errors import UsageError

FORMAT = 2


def state_names(variables) -> list[str]:
    """The names the arrays are stored under, in order: a Keras variable's path
    ("dense/kernel", "adam/dense_kernel_momentum"), else a tf.Variable's own name without
    TF's ":0" (the loss scale's "loss_scale" and "loss_scale_good_steps", named in
    precision.py), else (a plain array: tests, tools) its format-1 positional key.

    Two variables with one name are refused, not told apart by a counter: a counter is a
    position again, and restoring by position is what the names are here to prevent."""
    names = [_name(variable, i) for i, variable in enumerate(variables)]
    first = {}
    for i, name in enumerate(names):
        if name in first:
            raise UsageError(f"--checkpoint_dir: {name!r} names variables {first[name]} and {i} "
                             f"of the training state; expected one name per variable, as a "
                             f"checkpoint stores each under its name. Fix: give the layers "
                             f"distinct name= arguments")
        first[name] = i
    return names


def _name(variable, index: int) -> str:
    if getattr(variable, "path", None):
        return variable.path
    if getattr(variable, "name", None):
        return re.sub(r":\d+$", "", variable.name)
    return _positional_key(index)


def _positional_key(index: int) -> str:
    return f"v{index:05d}"


def write_arrays(f, names, variables):
    """np.savez's layout (a zip of <name>.npy), written here: savez takes the names as
    keyword arguments, where a variable named "file" would collide with its own."""
    with zipfile.ZipFile(f, "w", allowZip64=True) as archive:
        for name, variable in zip(names, variables):
            with archive.open(name + ".npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asarray(variable), allow_pickle=False)


def check_format(meta: dict):
    """ValueError unless meta.json's format is one this code reads, with its names."""
    form, names = meta.get("format", 1), meta.get("names")
    if type(form) is not int or form not in (1, FORMAT):  # `is`: a JSON true is no format
        raise ValueError(f"meta.json field 'format' is {form!r}, not 1 or {FORMAT} (a newer "
                         f"horovod_train wrote it)")
    if form == FORMAT and not (type(names) is list and len(names) == meta["num_variables"]
                               and all(type(name) is str for name in names)):
        raise ValueError(f"meta.json field 'names' is {names!r}, not a list of "
                         f"{meta['num_variables']} strings (num_variables)")


def is_positional(meta: dict) -> bool:
    return meta.get("format", 1) == 1


def stored_keys(meta: dict) -> list[str]:
    """Where each array sits in state.npz, in the order the state was saved."""
    if is_positional(meta):
        return [_positional_key(i) for i in range(meta["num_variables"])]
    return meta["names"]


def check_names(path: str, stored: list, names: list):
    """Refuses at the first position where the checkpoint's names and the model's differ.
    The order counts too: same-named layers run in another order compute another model."""
    for i, (got, want) in enumerate(itertools.zip_longest(stored, names)):
        if got != want:
            raise UsageError(
                f"--checkpoint_dir: {path} holds {_shown(got)} at position {i} of its "
                f"{len(stored)} variables, where this model has {_shown(want)} (of "
                f"{len(names)}); expected the same variables in the same order (a layer "
                f"renamed, added, removed or moved makes them differ). Fix: use a new "
                f"--checkpoint_dir, or go back to the model code that wrote it")


def _shown(name) -> str:
    return "nothing" if name is None else repr(name)


def check_shapes(path: str, arrays, variables):
    """Refuses, naming the first variable whose stored shape differs (a same-named layer
    of another width, or a checkpoint written before the data shapes were part of the
    fingerprint)."""
    for i, (array, variable) in enumerate(zip(arrays, variables)):
        got, want = tuple(np.shape(array)), tuple(variable.shape)
        if got != want:
            name = getattr(variable, "path", None) or getattr(variable, "name", None) or "?"
            raise UsageError(f"--checkpoint_dir: {path} holds shape {got} for variable {i} "
                             f"({name}), this model's is {want}; expected the shapes of the "
                             f"same model and data. Fix: use a new --checkpoint_dir, or restore "
                             f"the original flags (--dataset, --model)")
