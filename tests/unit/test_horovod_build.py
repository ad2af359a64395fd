"""Which Horovod is installed (launch/horovod_build.py): the marker's parsing, the
decision from a library's bytes, the defaults each build gets, and detection for real
against the Horovod this interpreter imports (the venv's patched build; the stock build
is read for real by tests/multiprocess/test_stock_horovod.py)."""
import json
import os
import subprocess
import sys

import pytest

from launch import horovod_build as hb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATCHES = os.path.join(ROOT, "scripts", "horovod-patches")
ALL = "build-marker,gloo-loop-yields,gloo-pair-exchange,wake-on-enqueue"


def _library(*parts: bytes) -> bytes:
    """Bytes standing for a library: ELF-ish filler around the given strings."""
    return b"\x7fELF" + b"\0" * 64 + b"\0".join(parts) + b"\0" * 64


def test_the_marker_names_the_digest_and_the_patches_features():
    digest, features = hb.parse_marker(f"patches=02f49ac1b0e8 applied={ALL}")
    assert digest == "02f49ac1b0e8" and features == hb.FEATURES


def test_a_patch_the_module_does_not_know_adds_no_feature():
    assert hb.parse_marker("patches=0123456789ab applied=build-marker,new-thing")[1] == frozenset()


@pytest.mark.parametrize("text", ["patches=xyz applied=a", "patches=0123456789ab",
                                  "garbage", "patches=0123456789abc applied=a"])
def test_a_malformed_marker_is_one_clear_line(text):
    with pytest.raises(ValueError) as err:
        hb.parse_marker(text)
    message = str(err.value)
    assert "received" in message and "expected" in message and "Fix: " in message
    assert "\n" not in message


def test_a_marked_library_is_patched_with_its_digest():
    data = _library(b"other", hb.MARKER + f"patches=abcdef012345 applied={ALL}".encode())
    assert hb.read_library(data) == (True, "abcdef012345", hb.FEATURES)


def test_a_library_without_marker_or_patch_symbols_is_stock():
    data = _library(b"_ZN7horovod6common10TensorQueue3AddEv", b"horovod_train-buil")
    assert hb.read_library(data) == (False, None, frozenset())


def test_an_unmarked_patched_build_is_told_by_the_functions_its_patches_export():
    """A patched build made before build-marker.patch: patched, digest unknown, features
    from the symbols they leave (gloo-loop-yields leaves none: inferred)."""
    data = _library(b"_ZN7horovod6common13GetLoopWakeupEv",
                    b"_ZN7horovod6common13PairAllreduceERN4gloo7ContextEPvmm")
    # The yields came into the set before the exchange: a build with one has both.
    assert hb.read_library(data) == (True, None, hb.FEATURES)
    only_wake = hb.read_library(_library(b"_ZN7horovod6common13GetLoopWakeupEv"))
    assert only_wake == (True, None, frozenset({"wake_on_enqueue"}))


def test_each_build_says_what_it_is():
    marked = hb.HorovodBuild(True, "0.28.1", True, "02f49ac1b0e8", hb.FEATURES)
    assert marked.describe() == "horovod 0.28.1 patched 02f49ac1b0e8"
    assert hb.STOCK.describe() == "horovod 0.28.1 stock"
    unmarked = hb.HorovodBuild(True, "0.28.1", True, None, frozenset({"wake_on_enqueue"}))
    assert unmarked.describe() == "horovod 0.28.1 patched (unmarked: wake_on_enqueue)"
    assert hb.HorovodBuild(False).describe() == "horovod not installed"


def test_the_cycle_follows_the_build():
    """5 ms only where a submitted tensor wakes the loop; stock keeps its 1 ms (5 ms made
    every small allreduce wait out the cycle there); with no Horovod here the ranks'
    backend decides. Idle MPI ranks yield on every build."""
    assert hb.cpu_sharing_defaults(hb.PATCHED) == {"HOROVOD_CYCLE_TIME": "5",
                                                   "OMPI_MCA_mpi_yield_when_idle": "1"}
    assert hb.cpu_sharing_defaults(hb.STOCK) == {"HOROVOD_CYCLE_TIME": "1",
                                                 "OMPI_MCA_mpi_yield_when_idle": "1"}
    assert hb.cpu_sharing_defaults(hb.HorovodBuild(False)) == {
        "OMPI_MCA_mpi_yield_when_idle": "1"}


def test_the_launcher_takes_the_same_defaults_for_the_build_it_is_given():
    from launch.envvars import cpu_sharing_env
    for build in (hb.PATCHED, hb.STOCK):
        launched = cpu_sharing_env(cores=8, ranks_per_host=2, build=build)
        assert {k: launched[k] for k in hb.cpu_sharing_defaults(build)} == \
            hb.cpu_sharing_defaults(build)


def test_the_python_digest_is_setup_shs(tmp_path):
    """patch_set_digest reproduces setup.sh's patches_digest (cat | sha256sum | cut)."""
    (tmp_path / "b.patch").write_bytes(b"second\n")
    (tmp_path / "a.patch").write_bytes(b"first\n")
    shell = subprocess.run(["bash", "-c", "cat \"$1\"/*.patch | sha256sum | cut -c1-12", "-",
                            str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert hb.patch_set_digest(str(tmp_path)) == shell.strip()


def test_the_installed_horovod_is_read_for_real_without_importing_it():
    """The venv's Horovod (make setup's build): patched, waking on enqueue, its Gloo
    patched; its digest, when it carries the marker, is this checkout's patch set. The
    library is read, not loaded: TensorFlow and Horovod stay unimported."""
    code = ("import json, sys; from launch import horovod_build as hb; b = hb.detect(); "
            "print(json.dumps({'installed': b.installed, 'patched': b.patched, 'digest': b.digest, "
            "'features': sorted(b.features), 'version': b.version, "
            "'loaded': sorted(m for m in ('tensorflow', 'horovod') if m in sys.modules)}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    if not seen["installed"]:
        pytest.skip("no Horovod installed in this interpreter")
    assert seen["loaded"] == [] and seen["version"] == "0.28.1"
    assert seen["patched"], "the venv's Horovod is stock. Fix: make setup"
    assert set(seen["features"]) == hb.FEATURES
    if seen["digest"] is not None:  # None: a build from before build-marker.patch
        assert seen["digest"] == hb.patch_set_digest(PATCHES), (
            "the venv's Horovod was built from another patch set. Fix: make setup")
