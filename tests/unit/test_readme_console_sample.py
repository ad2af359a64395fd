"""The pasted console samples (README's `make train`, docs/observability.md's run) name the
backend as the trainer describes it with the default flags, so a change to that line
(e.g. the gradient buckets) cannot leave the samples behind unnoticed.

The unit tier imports no TensorFlow, and backends/horovod.py does at import: its pure
parts (knob_env, options_from_config, describe) are compiled from its source alone."""
import ast
import os
import re
import types
from pathlib import Path

import pytest

from horovod_train import config as cfg
from horovod_train.backends import buckets
from launch import horovod_build

REPO = Path(__file__).resolve().parents[2]
HOROVOD = REPO / "horovod_train" / "backends" / "horovod.py"
CONFIG_LINE = re.compile(r"^(?:\[[\d,]+\]<stderr>:)?config \| backend (.+?) \| ranks ", re.M)


def _pure_parts() -> dict:
    tree = ast.parse(HOROVOD.read_text())
    wanted = {"knob_env", "options_from_config", "describe"}
    found = [node for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef) and node.name in wanted]
    for node in found:
        node.decorator_list = []          # options_from_config: called with cls=None below
    assert {node.name for node in found} == wanted
    namespace = {"os": os, "buckets": buckets}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(HOROVOD), "exec"), namespace)
    return namespace


def default_description() -> str:
    """What HorovodBackend(**options_from_config(defaults)).describe() returns on the
    Horovod `make setup` builds from this checkout (patched, this patch set's digest)."""
    parts = _pure_parts()
    options = parts["options_from_config"](None, cfg.RunConfig())
    digest = horovod_build.patch_set_digest(str(REPO / "scripts" / "horovod-patches"))
    backend = types.SimpleNamespace(
        build=horovod_build.HorovodBuild(True, "0.28.1", True, digest, horovod_build.FEATURES),
        compression=options["compression"], bucket_mb=options["bucket_mb"],
        bucket_bytes=buckets.mib_to_bytes(options["bucket_mb"]),
        knobs=parts["knob_env"](options["fusion_threshold_mb"], options["cycle_time_ms"],
                                options["hierarchical_allreduce"], options["timeline_path"]))
    return parts["describe"](backend)


def test_the_default_description_names_the_buckets():
    assert default_description() == (
        f"horovod 0.28.1 patched {horovod_build.patch_set_digest(str(REPO / 'scripts' / 'horovod-patches'))} "
        f"(compression none, gradient buckets of {cfg.DEFAULT_BUCKET_MB:g} MiB)")


@pytest.mark.parametrize("page", ["README.md", "docs/observability.md"])
def test_the_pasted_config_line_carries_the_trainers_description(page):
    lines = CONFIG_LINE.findall((REPO / page).read_text())
    assert lines, f"{page} shows no `config | backend ...` line"
    for shown in lines:
        assert shown == default_description(), (
            f"{page}'s sample says `backend {shown}`, the trainer prints "
            f"`backend {default_description()}`: paste a real run again")
