"""The stock-Horovod leg (issue 39): horovod 0.28.1 built from the same pinned sdist without
scripts/horovod-patches (`scripts/setup.sh site stock`: built once, cached under its own
key, installed into a directory of its own), put first on PYTHONPATH for the ranks while
the venv keeps its patched build.

What this shows: the build is detected as stock from its own library; 2 ranks under
horovodrun --gloo and --mpi train with it and end identical; and the stock-safe defaults
(launch/horovod_build.py, backends/horovod.py unset_bucket_mb) are the ones chosen, said
on the config line. Also that the patched build carries this checkout's patch digest.
Its own launches, not a scenario's: every rank must import another Horovod (PYTHONPATH,
read at start). Cached, the module takes about 30 s; without the wheel, setup builds it
first (2-15 minutes on 2 cores, once).
"""
import json
import os
import sys

import pytest

from helpers import ROOT, child_env, run_cli, run_setup
from ranks import assert_loss_fell, assert_ranks_identical, horovodrun, run_ranks

pytest.importorskip("horovod.tensorflow")

BUILD_TIMEOUT_S = 30 * 60  # a first build on 2 shared cores
DETECT = ("import json; from launch import horovod_build as hb; b = hb.detect(); "
          "print(json.dumps({'patched': b.patched, 'digest': b.digest, 'version': b.version, "
          "'features': sorted(b.features), 'library': b.library, 'line': b.describe()}))")


def _site(kind: str) -> str:
    """The directory `setup.sh site KIND` installed Horovod into (its last line)."""
    proc = run_setup("site", kind, timeout=BUILD_TIMEOUT_S, VENV=sys.prefix)
    site = proc.stdout.strip().splitlines()[-1]
    assert os.path.isdir(os.path.join(site, "horovod")), proc.stdout[-2000:]
    return site


def _path(site: str) -> str:
    return os.pathsep.join([site, ROOT])


def _detect(site: str) -> dict:
    proc = run_cli([sys.executable, "-c", DETECT], env=child_env(PYTHONPATH=_path(site)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stock_site():
    return _site("stock")


@pytest.fixture(scope="module", params=["gloo", "mpi"])
def stock_run(request, stock_site, tmp_path_factory):
    """One short job per controller on the stock build: (controller, summary, run dir)."""
    run_dir = tmp_path_factory.mktemp(f"stock-{request.param}")
    summary = run_ranks(horovodrun(2, request.param, ["--epochs=2", "--log_every=20"]),
                        run_dir, timeout=600, PYTHONPATH=_path(stock_site))
    return request.param, summary, run_dir


def test_the_stock_build_is_detected_as_stock(stock_site):
    seen = _detect(stock_site)
    assert seen["library"].startswith(stock_site), seen
    assert (seen["patched"], seen["digest"], seen["features"], seen["version"]) == \
        (False, None, [], "0.28.1"), seen
    assert seen["line"] == "horovod 0.28.1 stock"


def test_the_patched_build_carries_this_checkouts_patch_digest():
    """`setup.sh site patched`: the wheel make setup builds (same cache key), read for
    real: the marker build-marker.patch compiles in names this checkout's patch set."""
    from launch import horovod_build
    seen = _detect(_site("patched"))
    digest = horovod_build.patch_set_digest(os.path.join(ROOT, "scripts", "horovod-patches"))
    assert (seen["patched"], seen["digest"]) == (True, digest), seen
    assert set(seen["features"]) == horovod_build.FEATURES
    assert seen["line"] == f"horovod 0.28.1 patched {digest}"


def test_ranks_on_stock_horovod_end_identical(stock_run):
    controller, summary, run_dir = stock_run
    assert summary["backend"] == "horovod" and summary["world_size"] == 2, controller
    assert_ranks_identical(summary, run_dir, 2)
    assert_loss_fell(summary)


def _config_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "config | " in line]


def test_stock_defaults_are_chosen_and_said(stock_run):
    """The config line names the stock build; ranks sharing the host's cores keep
    Horovod's 1 ms cycle (our 5 ms would make every allreduce wait out a cycle there);
    the bucket rule and CPU binding are the patched build's (measured on both)."""
    controller, summary, _ = stock_run
    lines = _config_lines(summary["_stderr"])
    backend = [line for line in lines if "config | backend " in line]
    assert backend and "config | backend horovod 0.28.1 stock (compression none, " \
        in backend[0], lines
    chosen = [line for line in lines if "CPU defaults chosen" in line]
    assert chosen and "HOROVOD_CYCLE_TIME=1 " in chosen[0], lines
    assert summary["config"]["speed"]["allreduce_bucket_mb"] is None
    assert "(local rank 0 of 2)" in backend[0], backend[0]  # bound
    if controller == "gloo":
        assert "gradients in one grouped allreduce" in backend[0], backend[0]
    else:
        assert "gradient buckets of 4 MiB" in backend[0], backend[0]
