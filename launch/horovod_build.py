"""Which Horovod is installed: our patched build (with its patch set's digest) or stock.

scripts/setup.sh builds Horovod with scripts/horovod-patches/*.patch applied; one of them
(build-marker.patch) compiles the string "horovod_train-build patches=<digest>
applied=<names>" into the library. It is read here from the installed library's bytes:
nothing is imported or loaded, so this is TF-free, Horovod-free and usable by launch/
(which may import neither) as well as by the worker side. A library without the string
is stock, except that a patched build made before the marker existed still shows the
exported functions two of the patches add (its digest is then unknown).

Every default that depends on the patches is decided from a HorovodBuild, in one place
each: the CPU-sharing cycle time (cpu_sharing_defaults, below) and the planner's loop
model (horovod_train/plan/comm.py, exposed_comm). The Gloo bucket rule
(horovod_train/backends/horovod.py, unset_bucket_mb) and CPU binding (horovod_train/cpus.py)
were measured in training on both builds and are the same for both (docs/install.md).
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import mmap
import os
import re

MARKER = b"horovod_train-build "
# The marker's text after MARKER: "patches=<12 hex> applied=<name>[,<name>...]".
_MARKER_TEXT = re.compile(r"patches=([0-9a-f]{12}) applied=([a-z0-9,-]+)")
# Patch name (scripts/horovod-patches/<name>.patch) -> the feature it brings.
PATCH_FEATURES = {"wake-on-enqueue": "wake_on_enqueue",
                  "gloo-pair-exchange": "gloo_pair_exchange",
                  "gloo-loop-yields": "gloo_loop_yields"}
FEATURES = frozenset(PATCH_FEATURES.values())
# Functions two patches add and the library exports (their mangled names): how a patched
# build made before build-marker.patch is told from stock. gloo-loop-yields adds none
# (read_library infers it).
_FEATURE_SYMBOLS = {"wake_on_enqueue": b"_ZN7horovod6common13GetLoopWakeupEv",
                    "gloo_pair_exchange": b"_ZN7horovod6common13PairAllreduceERN4gloo7Context"}


@dataclasses.dataclass(frozen=True)
class HorovodBuild:
    """What the installed Horovod is. `features` holds FEATURES' names present."""
    installed: bool
    version: str | None = None
    patched: bool = False
    digest: str | None = None       # the patch set's digest (scripts/setup.sh's); None: unknown
    features: frozenset = frozenset()
    library: str | None = None

    @property
    def wakes_on_enqueue(self) -> bool:
        """A submitted tensor starts the next cycle at once (wake-on-enqueue.patch)."""
        return "wake_on_enqueue" in self.features

    def describe(self) -> str:
        """'horovod 0.28.1 patched 02f49ac1b0e8', '... stock', 'horovod not installed'."""
        if not self.installed:
            return "horovod not installed"
        name = f"horovod {self.version or '(version unknown)'}"
        if not self.patched:
            return f"{name} stock"
        if self.digest:
            return f"{name} patched {self.digest}"
        return f"{name} patched (unmarked: {','.join(sorted(self.features))})"


# The two kinds, for decisions made without a library at hand (tests, what-ifs).
PATCHED = HorovodBuild(True, "0.28.1", True, None, FEATURES)
STOCK = HorovodBuild(True, "0.28.1", False)


def parse_marker(text: str) -> tuple[str, frozenset]:
    """'patches=<digest> applied=a,b' -> (digest, features of the known patches)."""
    found = _MARKER_TEXT.fullmatch(text.strip())
    if not found:
        raise ValueError(f"horovod build marker: received {text!r}; expected "
                         f"'patches=<12 hex digits> applied=<names>'. Fix: rebuild Horovod "
                         f"with 'make setup' (scripts/setup.sh writes the marker)")
    names = found.group(2).split(",")
    return found.group(1), frozenset(PATCH_FEATURES[n] for n in names if n in PATCH_FEATURES)


def read_library(data) -> tuple[bool, str | None, frozenset]:
    """(patched, digest, features) from a library's bytes (bytes or an mmap)."""
    at = data.find(MARKER)
    if at >= 0:
        end = data.find(b"\0", at)
        text = bytes(data[at + len(MARKER):end if end >= 0 else at + 512])
        digest, features = parse_marker(text.decode("ascii", "replace"))
        return True, digest, features
    features = {f for f, symbol in _FEATURE_SYMBOLS.items() if data.find(symbol) >= 0}
    if "gloo_pair_exchange" in features:
        # The set gained gloo-loop-yields before gloo-pair-exchange (which is the last one
        # an unmarked build can have): a build with the exchange has the yields too.
        features.add("gloo_loop_yields")
    return bool(features), None, frozenset(features)


def library_path(package_dir: str) -> str | None:
    """Horovod's TensorFlow library in an installed horovod package directory."""
    found = sorted(glob.glob(os.path.join(package_dir, "tensorflow", "mpi_lib*.so")))
    return found[0] if found else None


def inspect_library(path: str, version: str | None) -> HorovodBuild:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        patched, digest, features = read_library(data)
    return HorovodBuild(True, version, patched, digest, features, path)


@functools.lru_cache(maxsize=None)
def detect() -> HorovodBuild:
    """The Horovod this interpreter would import (sys.path order, PYTHONPATH first),
    found without importing it. Not installed, or no TensorFlow library in it: installed
    False (nothing to fence: the horovod backend refuses to start without it)."""
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return HorovodBuild(False)
    package_dir = list(spec.submodule_search_locations)[0]
    path = library_path(package_dir)
    if path is None:
        return HorovodBuild(False)
    return inspect_library(path, _version(package_dir))


def _version(package_dir: str) -> str | None:
    """The version of the horovod distribution beside that package (a --target install
    puts its .dist-info next to it), else the first one importlib finds."""
    parent = os.path.dirname(package_dir)
    for dist in importlib.metadata.distributions(path=[parent]):
        if dist.metadata["Name"] and dist.metadata["Name"].lower() == "horovod":
            return dist.version
    try:
        return importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return None


def patch_set_digest(patch_dir: str) -> str:
    """The digest scripts/setup.sh gives the patch set in `patch_dir` (its patches_digest:
    sha256 of the *.patch files laid end to end in name order, 12 hex digits)."""
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(patch_dir, "*.patch"))):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


# ---- the CPU-sharing defaults (several ranks sharing one CPU host's cores) ----------
def cpu_sharing_defaults(build: HorovodBuild) -> dict[str, str]:
    """What the launcher (for the ranks it starts) and the horovod backend (for ranks
    started otherwise) set when several ranks share a CPU host's cores, only where the
    user has not; never on a GPU host. With no Horovod here (a launcher on a login node)
    the cycle is left to the ranks' backend, which reads their own build."""
    defaults = {
        # Horovod's background thread starts a cycle (a coordination collective, then the
        # collectives ready) every HOROVOD_CYCLE_TIME ms. At stock's 1 ms an idle MPI rank
        # spins in that collective and takes its neighbour's core. Our build wakes the loop
        # as soon as a tensor is submitted (wake-on-enqueue.patch), so a 5 ms cycle costs
        # an allreduce no latency; it only sets how often an idle rank checks in. Stock
        # waits out the cycle on every allreduce: 5 ms made a 4 KiB allreduce ~5 ms there
        # (scripts/horovod-patches/README.md has the figures), so stock keeps its own 1 ms.
        "HOROVOD_CYCLE_TIME": "5" if build.wakes_on_enqueue else "1",
        # Open MPI busy-polls while waiting; yielding gives the core back to the
        # neighbouring rank. Read at MPI_Init, i.e. inside hvd.init(). Any build.
        "OMPI_MCA_mpi_yield_when_idle": "1",
    }
    if not build.installed:
        del defaults["HOROVOD_CYCLE_TIME"]
    return defaults
