"""What a checkpoint records of the run that wrote it, and whether this run may continue
it: the config fields that must match, the sizes a relaunch may change (resume.py), and
the facts of the run (world size, data shapes). TF-free; checkpoint.py writes and checks
the record, loop.py reads it to plan a resume.
"""
import dataclasses
import json
import os

from horovod_train import checkpoint_commit as commit, checkpoint_meta

# Config fields that change the shape of the state or the data order: a checkpoint made
# with other values cannot be continued exactly.
_MUST_MATCH = ("model", "data.dataset", "runtime.seed", "speed.precision", "optim.optimizer")
# Recorded too, but free to change: with the world size they make the global batch,
# which resume.py keeps (or, when allowed, changes) on a relaunch.
_SIZES = ("data.batch_size", "speed.grad_accum_steps")
# Facts of the run that a resume may change (resume.py decides how).
_RESIZABLE = ("world_size",)


def _field(config_dict, dotted):
    value = config_dict
    for part in dotted.split("."):
        value = value[part]
    return value


def fingerprint(config, facts: dict | None = None) -> dict:
    """The config fields that must match, plus facts of the run (world size, data
    shapes) as JSON would give them back (a tuple shape compares equal to its list)."""
    as_dict = dataclasses.asdict(config)
    return dict({name: _field(as_dict, name) for name in _MUST_MATCH + _SIZES},
                **_plain(facts))


def _plain(facts: dict | None) -> dict:
    return json.loads(json.dumps(facts or {}, default=lambda o: getattr(o, "item", o.__str__)()))


def differences(stored: dict, config, facts=None) -> list[str]:
    """What differs between a checkpoint's recorded fingerprint and this run, as
    'field: checkpoint X, now Y' (empty: this run may continue it)."""
    now = _plain(facts)
    diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {v!r}"
             for k, v in fingerprint(config).items() if k not in _SIZES and stored.get(k) != v]
    # A fact the checkpoint lacks was not recorded then (an older version): accepted.
    diffs += [f"{k}: checkpoint {stored[k]!r}, now {v!r}" for k, v in now.items()
              if k not in _RESIZABLE and k in stored and stored[k] != v]
    return diffs + _global_batch_diff(stored, config, now.get("world_size"))



def _global_batch_diff(stored: dict, config, world_size) -> list[str]:
    """The global batch must be the one resume.plan chose: the checkpoint's, unless the
    change was allowed. Checked again here because an older checkpoint than the one the
    plan read may be the one that loads."""
    written = _written({"step": 0, "fingerprint": stored}, config)
    if written is None or world_size is None or config.train.allow_global_batch_change:
        return []
    now = world_size * config.data.batch_size * config.speed.grad_accum_steps
    if now == written.global_batch:
        return []
    return [f"global batch: checkpoint {written.global_batch}, now {now}"]


def written_by(meta: dict, config, chief: bool = True) -> "resume.Written | None":
    """What a checkpoint's meta.json records of the run that wrote it, for resume.plan;
    None when it recorded no world size (too old to resume on another one). A meta
    without a learning-rate record (older) used the rule of a fresh start. Every value
    read is checked first (checkpoint_meta: a UsageError names one out of range; a field
    an older version lacks is named by the `chief` only, not once per rank)."""
    checkpoint_meta.check(meta, _newest_path(meta, config), chief)
    return _written(meta, config)


def _newest_path(meta: dict, config) -> str:
    """Where the checkpoint whose meta every rank has (the chief's newest) lies: as the
    chief read it (checkpoint.newest_meta), else as its step names it."""
    if isinstance(meta.get(checkpoint_meta.READ_FROM), str):
        return meta[checkpoint_meta.READ_FROM]
    step = meta.get("step")
    named = commit.name(step) if type(step) is int and step >= 0 else "ckpt-?"
    return os.path.join(config.train.checkpoint_dir or ".", named)


def _written(meta: dict, config) -> "resume.Written | None":
    from horovod_train import resume
    stored = meta["fingerprint"]
    ranks = stored.get("world_size")
    sizes = [stored.get(k) for k in _SIZES]
    if not all(isinstance(v, int) and v > 0 for v in [ranks, *sizes]):
        return None
    schedule = meta.get("lr_schedule") or {}
    scale = schedule.get("scale", ranks if config.optim.scale_lr else 1)
    return resume.Written(meta["step"], ranks, *sizes, float(scale), schedule.get("warmup_steps"))
