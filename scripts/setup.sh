#!/usr/bin/env bash
# One idempotent setup for a fresh Debian 12 machine (as root, no stdin) or a re-run.
#   1. apt packages (OpenMPI, compilers, cmake 3.25, Slurm + munge for the Slurm tests) -
#      only what is missing;
#   2. the venv with the pinned requirements - only when the requirements changed;
#   3. horovod==$HOROVOD_VERSION built from its sdist, with scripts/horovod-patches/*.patch
#      applied, against the venv's TensorFlow - the wheel is cached per TF/CUDA/Python
#      version and patch set, so re-runs install it in seconds;
#   4. this package, editable.
# Each step leaves a stamp, so a machine that is already set up finishes in seconds.
#
# `setup.sh site stock` instead builds (once) the same pinned sdist with no patches, under a
# cache key of its own, installs it into a directory of its own and prints that directory:
# the stock-Horovod test leg puts it first on PYTHONPATH, and the venv keeps its patched
# build. `setup.sh site patched` does the same with the patched wheel.
#
# GPU=1 builds the GPU variant instead: .venv-gpu with tensorflow[and-cuda] and
# Horovod with NCCL (scripts/setup_gpu.sh). The CPU .venv is left as it is.
set -euo pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU=${GPU:-0}
PYTHON=${PYTHON:-python3}
CACHE=${HOROVOD_TRAIN_CACHE:-$HOME/.cache/horovod_train}
HOROVOD_VERSION=0.28.1
# The sdist the patches were written against, byte for byte (they carry no context lines,
# so they apply only to exactly this file).
HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
HOROVOD_PATCHES=("$ROOT"/scripts/horovod-patches/*.patch)  # what each does: its README
REQUIREMENTS_CHANGED=0
APT_PACKAGES=(openmpi-bin libopenmpi-dev build-essential cmake git python3-dev python3-venv iproute2 procps)
# Debian's Slurm 22.05 and munge: tests/multiprocess/test_slurm_local.py runs real sbatch,
# srun and salloc jobs on a cluster scripts/slurm_local.sh starts on this machine (its own
# config, ports and munge key; the packages' own services are not used). About 20 s to
# install once (apt-get update included); nothing on later runs.
APT_PACKAGES+=(slurm-wlm munge)
APT_PACKAGES+=(ccache)  # the Horovod builds share compiled files (compiler_cache_env)
FRAMEWORKS=(TensorFlow MPI Gloo)  # what horovodrun --check-build must list
if [[ $GPU == 1 ]]; then
  VENV=${VENV:-$ROOT/.venv-gpu}
  REQUIREMENTS=$ROOT/requirements-gpu.txt
  source "$ROOT/scripts/setup_gpu.sh"
  APT_PACKAGES+=("${GPU_APT_PACKAGES[@]}")
  FRAMEWORKS+=(NCCL)
elif [[ $GPU == 0 ]]; then
  VENV=${VENV:-$ROOT/.venv}
  REQUIREMENTS=$ROOT/requirements.txt
else
  printf '[setup] ERROR: GPU=%s; expected 0 or 1. Fix: make setup GPU=1 (NCCL build) or GPU=0\n' "$GPU" >&2
  exit 2
fi

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

install_apt_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && { log "apt packages present"; return; }
  [[ $(id -u) -eq 0 ]] || die "missing apt packages: ${missing[*]}. Fix: run 'sudo make setup' or install them."
  log "installing apt packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
}

# Installs into the venv with uv (pinned in requirements.txt), not pip: from its cache uv
# links files in where pip unpacks every wheel again, so a fresh venv (each clean clone,
# each CI run) takes about 15 s instead of 40. pip stays for the Horovod source build.
# --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (it is on this
# project's CI machines) no import writes a .pyc, and every rank would compile
# TensorFlow's sources again at each start.
pip_install() {
  "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" "$@" </dev/null
}

install_requirements() {
  [[ -x $VENV/bin/python ]] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
  local want have
  want=$(cat "$ROOT"/requirements*.txt | sha256sum | cut -d' ' -f1)  # the GPU file includes the CPU one
  have=$(cat "$VENV/.requirements.sha256" 2>/dev/null || true)
  [[ $want == "$have" ]] && { log "python requirements present"; return; }
  log "installing python requirements (tensorflow is large: a few minutes the first time)"
  "$VENV/bin/pip" install -q "$(grep -m1 '^uv==' "$ROOT/requirements.txt")" </dev/null
  pip_install --upgrade pip setuptools wheel
  pip_install -r "$REQUIREMENTS"
  echo "$want" >"$VENV/.requirements.sha256"
  REQUIREMENTS_CHANGED=1  # install_horovod checks that the Horovod there still loads
}

# TF >= 2.19 moved the XLA headers that horovod/tensorflow/xla_mpi_ops.cc includes,
# and the ones still shipped pull in third-party headers TF does not ship
# (highwayhash). That file's code is compiled only for GPU builds (HAVE_GPU); on CPU
# it needs its XLA includes to resolve and nothing more, so empty placeholders at
# those paths, found first through -iquote, let it compile. GPU builds must not use
# this: they compile that code, against forwarding headers (setup_gpu.sh).
XLA_INCLUDES=(
  tensorflow/compiler/tf2xla/xla_op_kernel.h
  tensorflow/compiler/tf2xla/xla_op_registry.h
  tensorflow/compiler/xla/client/xla_builder.h
  tensorflow/compiler/xla/service/custom_call_target_registry.h
  tensorflow/compiler/xla/service/hlo.pb.h
  tensorflow/compiler/xla/shape.h
  tensorflow/compiler/xla/xla_data.pb.h
)
make_xla_placeholders() {
  local dir=$1 h
  rm -rf "$dir" && mkdir -p "$dir"
  for h in "${XLA_INCLUDES[@]}"; do
    mkdir -p "$dir/$(dirname "$h")"
    echo "// placeholder for CPU builds: see scripts/setup.sh" >"$dir/$h"
  done
}

# The patch set's identity: part of the wheel's cache key, so a changed patch rebuilds, and
# compiled into the library (build-marker.patch), where horovod_train reads it at run time
# (launch/horovod_build.py).
patches_digest() { cat "${HOROVOD_PATCHES[@]}" | sha256sum | cut -c1-12; }

# The header build-marker.patch includes: the digest and the names of the patches applied.
write_build_marker() {
  local names=() p
  for p in "${HOROVOD_PATCHES[@]}"; do names+=("$(basename "$p" .patch)"); done
  printf '// written by horovod_train scripts/setup.sh\n#define HOROVOD_TRAIN_BUILD "patches=%s applied=%s"\n' \
    "$(patches_digest)" "$(IFS=,; echo "${names[*]}")" >"$1/horovod/common/horovod_train_build.h"
}

# Echoes a fresh source tree: the pinned sdist (downloaded once into $CACHE), extracted
# and, unless $1 is "stock", patched. Fresh each build, so a half-applied patch can never
# be built.
horovod_source() {
  local kind=$1 sdist=$CACHE/sdist/horovod-$HOROVOD_VERSION.tar.gz src=$CACHE/src p
  [[ $kind == stock ]] && src=$CACHE/src-stock
  if [[ ! -f $sdist ]]; then
    rm -rf "$CACHE/sdist.new" && mkdir -p "$CACHE/sdist.new"
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$CACHE/sdist.new" \
      "horovod==$HOROVOD_VERSION" </dev/null >&2
    mkdir -p "$CACHE/sdist" && mv "$CACHE/sdist.new/horovod-$HOROVOD_VERSION.tar.gz" "$sdist"
    rm -rf "$CACHE/sdist.new"
  fi
  sha256sum --status -c <<<"$HOROVOD_SDIST_SHA256  $sdist" ||
    die "$sdist: received sha256 $(sha256sum "$sdist" | cut -d' ' -f1); expected $HOROVOD_SDIST_SHA256 (the sdist the patches were written for). Fix: delete it and rerun setup"
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$sdist" -C "$src"
  if [[ $kind != stock ]]; then
    for p in "${HOROVOD_PATCHES[@]}"; do
      patch -p1 --batch --forward --silent -d "$src/horovod-$HOROVOD_VERSION" <"$p" >&2 ||
        die "$p did not apply to horovod $HOROVOD_VERSION's sdist"
    done
    write_build_marker "$src/horovod-$HOROVOD_VERSION"
  fi
  echo "$src/horovod-$HOROVOD_VERSION"
}

# ccache for the Horovod builds: the stock build (test_stock_horovod) and the GPU build
# compile many files exactly as the patched build did (Gloo, most of Horovod's common code),
# so on a fresh machine they reuse its objects: from a warm cache the stock build took 104 s
# against 174 s without (issue 64). Paths are made relative to the build cache, where the
# src and src-stock trees live, so both trees share entries; CMake reads the launchers.
compiler_cache_env() {
  printf '%s\n' "CCACHE_DIR=$CACHE/ccache" "CCACHE_BASEDIR=$CACHE" CCACHE_NOHASHDIR=1 \
    CCACHE_MAXSIZE=2G CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache \
    CMAKE_CUDA_COMPILER_LAUNCHER=ccache
}

# $1: where the wheel goes; $2: "patched" (the patches here) or "stock" (none).
build_horovod_wheel() {
  local wheel_dir=$1 kind=$2 shim=$CACHE/xla-placeholders extra=() src log
  log=$CACHE/horovod-build.log
  [[ $kind == stock ]] && log=$CACHE/horovod-build-stock.log
  if [[ $GPU == 1 ]]; then
    gpu_build_env >"$CACHE/gpu-build.env"  # in this shell, so that a failure stops setup
    mapfile -t extra <"$CACHE/gpu-build.env"
  else
    make_xla_placeholders "$shim"
    extra=("CXXFLAGS=-iquote $shim")
  fi
  mapfile -t -O "${#extra[@]}" extra < <(compiler_cache_env)
  src=$(horovod_source "$kind")
  log "building $kind horovod==$HOROVOD_VERSION from source (5-15 minutes on 2 cores); log: $log"
  # Debian's cmake 3.25 (not PyPI's cmake 4, which rejects the bundled Gloo); the policy
  # minimum is belt and braces in case a newer cmake is first on PATH. --no-cache-dir:
  # pip's own wheel cache would hand the GPU build the CPU wheel (same name and version).
  if ! env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CMAKE=/usr/bin/cmake \
      CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j2 "${extra[@]}" \
      "$VENV/bin/pip" wheel -v --no-cache-dir --no-build-isolation --no-deps \
        -w "$wheel_dir" "$src" </dev/null >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "the Horovod build failed; full log in $log"
  fi
}

# The TF, Python (and CUDA) versions a wheel is built for: the first part of its cache key.
# Sets BUILD_TAG (and, for GPU=1, CUDA_BUILD_HOME, which the GPU build reads): in this
# shell, not in a $(...), so that both outlive the call.
set_build_tag() {
  BUILD_TAG=$("$VENV/bin/python" -c 'import sys, importlib.metadata as m
print("tf%s-py%d%d" % (m.version("tensorflow"), *sys.version_info[:2]))')
  if [[ $GPU == 1 ]]; then
    CUDA_BUILD_HOME=$(find_cuda_home)
    BUILD_TAG=${BUILD_TAG/-py/-$(cuda_tag)-py}
  fi
}

install_horovod() {
  local tag stamp_want wheel_dir wheel
  set_build_tag
  tag=$BUILD_TAG-patches-$(patches_digest)
  stamp_want="horovod-$HOROVOD_VERSION-$tag"
  # The stamp names the TF, Python (and CUDA) versions and the patch set the wheel was
  # built for, so a requirements change that kept them (a new tool pinned) keeps this
  # Horovod, once it is seen to load; reinstalling it would only cost time.
  if [[ $(cat "$VENV/.horovod.stamp" 2>/dev/null || true) == "$stamp_want" ]] &&
      { [[ $REQUIREMENTS_CHANGED == 0 ]] || "$VENV/bin/horovodrun" --check-build >/dev/null 2>&1; }; then
    log "horovod present ($stamp_want)"
    return
  fi
  wheel_dir=$CACHE/wheels/$tag
  wheel=$(ls "$wheel_dir"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -n $wheel ]]; then
    log "using cached wheel $wheel"
    install_checked "$wheel"
  else
    # Built aside and cached only once it has passed the check: a wheel that fails
    # it must not be handed to every later setup.
    rm -rf "$wheel_dir.new"
    build_horovod_wheel "$wheel_dir.new" patched
    install_checked "$(ls "$wheel_dir.new"/horovod-"$HOROVOD_VERSION"-*.whl | head -n1)"
    rm -rf "$wheel_dir" && mv "$wheel_dir.new" "$wheel_dir"
  fi
  echo "$stamp_want" >"$VENV/.horovod.stamp"
}

install_checked() {
  pip_install --no-deps --reinstall "$1"
  check_horovod_build
}

check_horovod_build() {
  local out
  out=$("$VENV/bin/horovodrun" --check-build 2>&1) || die "horovodrun --check-build failed: $out"
  for fw in "${FRAMEWORKS[@]}"; do
    grep -q "\[X\] $fw" <<<"$out" || die "horovod was built without $fw:\n$out"
  done
  log "horovodrun --check-build: ${FRAMEWORKS[*]} present"
}

# Prints a directory holding horovod==$HOROVOD_VERSION as KIND ($1) builds it: "stock", the
# pinned sdist with no patches (cached under a key of its own), or "patched", the wheel
# install_horovod uses (same cache key). `pip install --target` keeps it out of the venv:
# a run puts it first on PYTHONPATH (the stock-Horovod test leg), the venv keeps its own.
# Checked like the venv's build, with that directory first on PYTHONPATH.
horovod_site() {
  local kind=$1 tag wheel_dir site wheel
  [[ -x $VENV/bin/python ]] || die "no venv at $VENV; expected the one setup made. Fix: make setup, or VENV=/path/to/venv"
  case $kind in
    stock) set_build_tag; tag=$BUILD_TAG-stock ;;
    patched) set_build_tag; tag=$BUILD_TAG-patches-$(patches_digest) ;;
    *) die "received site kind '$kind'; expected stock or patched. Fix: bash scripts/setup.sh site stock" ;;
  esac
  wheel_dir=$CACHE/wheels/$tag site=$CACHE/sites/$tag
  if [[ ! -f $site/.checked ]]; then
    wheel=$(ls "$wheel_dir"/horovod-"$HOROVOD_VERSION"-*.whl 2>/dev/null | head -n1 || true)
    if [[ -z $wheel ]]; then
      rm -rf "$wheel_dir.new"
      build_horovod_wheel "$wheel_dir.new" "$kind"
      wheel=$(ls "$wheel_dir.new"/horovod-"$HOROVOD_VERSION"-*.whl | head -n1)
    fi
    rm -rf "$site.new"
    pip_install --no-deps --target "$site.new" "$wheel" >&2
    PYTHONPATH=$site.new check_horovod_build >&2
    if [[ -d $wheel_dir.new ]]; then  # cached only once it has passed the check
      rm -rf "$wheel_dir" && mv "$wheel_dir.new" "$wheel_dir"
    fi
    touch "$site.new/.checked"
    rm -rf "$site" && mv "$site.new" "$site"
  fi
  echo "$site"
}

install_package() {
  # The stamp is the packaging files' digest: a change to them (a new console script)
  # re-installs, or an old venv would lack the new command.
  local stamp_want
  stamp_want=$(cd "$ROOT" && cat setup.cfg setup.py pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)
  if [[ $(cat "$VENV/.package.stamp" 2>/dev/null || true) == "$stamp_want" ]]; then
    log "horovod_train installed (editable)"
    return
  fi
  pip_install --no-deps --no-build-isolation -e "$ROOT"
  echo "$stamp_want" >"$VENV/.package.stamp"
}

main() {
  mkdir -p "$CACHE"
  install_apt_packages
  install_requirements
  install_horovod
  install_package
  log "ready: ${VENV#"$ROOT"/}"  # relative to the repository when inside it
}

case ${1:-} in
  "") main ;;
  site) mkdir -p "$CACHE" && horovod_site "${2:-}" ;;
  *) printf '[setup] ERROR: received argument %q; expected none, or site stock|patched. Fix: bash scripts/setup.sh [site stock]\n' "$1" >&2
     exit 2 ;;
esac
