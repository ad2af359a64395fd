# The GPU half of scripts/setup.sh (sourced by it when GPU=1): where nvcc and NCCL come
# from, and the headers that let Horovod's XLA ops compile against TF 2.21. Defines
# functions only; setup.sh calls them.
#
# The toolchain, in this order (the first that exists wins, and setup says which):
#   1. the host's CUDA toolkit: $CUDA_HOME, else the nvcc on PATH (most GPU clusters);
#   2. CUDA 13's compiler wheels from PyPI, installed under $CACHE (PyPI's CUDA 12
#      compiler wheels hold ptxas but no nvcc, so 13 is the release PyPI can build with).
# Horovod's CMake links the CUDA runtime statically, so a CUDA 13 build carries its own
# runtime beside TF's CUDA 12 one; both drive the same driver, which must then be a
# CUDA 13 driver (>= 580) and the GPU sm_75 or newer (CUDA 13 dropped older ones).
# NCCL is TF's own (nvidia-nccl-cu12 in the venv), linked shared and found through an
# $ORIGIN-relative RUNPATH, so the wheel works in any venv of the same layout.

CUDA_PYPI_RELEASE=13.0
CUDA_PYPI_PACKAGES=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
                    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
# Compute capabilities to build Horovod's kernels for, kept to those nvcc knows: V100
# (70, CUDA 12 only), T4 (75), A100 (80), A10/A40 (86), L4/L40 (89), H100 (90), B200
# (100), RTX 50xx (120). The newest also gets PTX. HOROVOD_BUILD_CUDA_CC_LIST overrides.
CUDA_CC_WANTED=(70 75 80 86 89 90 100 120)
# The XLA headers xla_mpi_ops.cc includes by their pre-2.19 paths -> where TF 2.21 has
# them. The CPU build gives the same old paths empty placeholders (setup.sh).
declare -A XLA_FORWARDS=(
  [tensorflow/compiler/xla/client/xla_builder.h]=xla/hlo/builder/xla_builder.h
  [tensorflow/compiler/xla/service/custom_call_target_registry.h]=xla/service/custom_call_target_registry.h
  [tensorflow/compiler/xla/service/hlo.pb.h]=xla/service/hlo.pb.h
  [tensorflow/compiler/xla/xla_data.pb.h]=xla/xla_data.pb.h
)
GPU_APT_PACKAGES=(libhighwayhash-dev)  # xla/printer.h includes highwayhash; TF ships none

# The toolkit root of an nvcc: nvcc itself reports it (wrappers and symlinks included).
nvcc_root() {
  local top
  top=$("$1" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1)
  [[ -n $top && -x $top/bin/nvcc ]] || return 1
  (cd "$top" && pwd)
}

pypi_cuda_toolchain() {
  local home=$CACHE/cuda-$CUDA_PYPI_RELEASE-pypi
  if [[ ! -x $home/bin/nvcc ]]; then
    log "no nvcc on this host: installing CUDA $CUDA_PYPI_RELEASE's compiler from PyPI into $home" >&2
    rm -rf "$home.tmp"
    "$VENV/bin/pip" install -q --no-deps --target "$home.tmp" "${CUDA_PYPI_PACKAGES[@]}" </dev/null >&2
    # The wheels share one tree, nvidia/cu13/{bin,include,lib,nvvm}. CMake's
    # FindCUDAToolkit wants lib64 and the unversioned libcudart.so a toolkit has.
    mv "$home.tmp/nvidia/cu13" "$home.tmp/root"
    ln -s lib "$home.tmp/root/lib64"
    ln -s libcudart.so.13 "$home.tmp/root/lib/libcudart.so"
    mv "$home.tmp/root" "$home" && rm -rf "$home.tmp"
  fi
  echo "$home"
}

find_cuda_home() {
  local nvcc
  if [[ -n ${CUDA_HOME:-} ]]; then
    [[ -x $CUDA_HOME/bin/nvcc ]] || die "CUDA_HOME=$CUDA_HOME has no bin/nvcc; expected a CUDA toolkit there. Fix: point CUDA_HOME at the toolkit (the directory holding bin/nvcc), or unset it"
    log "CUDA toolkit: \$CUDA_HOME=$CUDA_HOME" >&2
    echo "$CUDA_HOME"
  elif nvcc=$(command -v nvcc) && nvcc_root "$nvcc"; then
    log "CUDA toolkit: the host's, from $nvcc" >&2
  else
    pypi_cuda_toolchain
  fi
}

cuda_release() {  # "13.0" from nvcc --version
  "$1/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p'
}

cuda_cc_list() {
  [[ -n ${HOROVOD_BUILD_CUDA_CC_LIST:-} ]] && { echo "$HOROVOD_BUILD_CUDA_CC_LIST"; return; }
  local known cc list=()
  known=" $("$1/bin/nvcc" --list-gpu-code | tr '\n' ' ') "
  for cc in "${CUDA_CC_WANTED[@]}"; do
    [[ $known == *" sm_$cc "* ]] && list+=("$cc")
  done
  [[ ${#list[@]} -gt 0 ]] || die "nvcc in $1 knows none of sm_${CUDA_CC_WANTED[*]}. Fix: set HOROVOD_BUILD_CUDA_CC_LIST"
  (IFS=,; echo "${list[*]}")
}

# NCCL from the venv's nvidia-nccl-cu12, with the unversioned libnccl.so that CMake's
# find_library needs, in a link directory of our own (the venv stays untouched).
nccl_link_dir() {
  local site nccl link=$CACHE/nccl-link
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  nccl=$site/nvidia/nccl
  [[ -f $nccl/include/nccl.h && -f $nccl/lib/libnccl.so.2 ]] || die "no NCCL in $VENV (expected $nccl/lib/libnccl.so.2 from nvidia-nccl-cu12, installed by tensorflow[and-cuda]). Fix: rm -rf $VENV and run 'make setup GPU=1'"
  rm -rf "$link" && mkdir -p "$link/lib"
  ln -s "$nccl/include" "$link/include"
  ln -s "$nccl/lib/libnccl.so.2" "$link/lib/libnccl.so"
  echo "$link"
}

make_xla_forwards() {
  local dir=$1 old
  rm -rf "$dir" && mkdir -p "$dir"
  for old in "${!XLA_FORWARDS[@]}"; do
    mkdir -p "$dir/$(dirname "$old")"
    printf '// forwards to TF 2.21'"'"'s layout: see scripts/setup_gpu.sh\n#include "%s"\n' \
      "${XLA_FORWARDS[$old]}" >"$dir/$old"
  done
  # XLA dropped its own StatusOr alias for absl's; xla_mpi_ops.cc still names it.
  printf '#include "absl/status/statusor.h"\nnamespace xla { template <typename T> using StatusOr = absl::StatusOr<T>; }\n' \
    >>"$dir/tensorflow/compiler/xla/client/xla_builder.h"
}

# mpi_ops.cc declares stream_executor::gpu::AsGpuStreamValue and expects TF to define it;
# TF 2.21 no longer does (loading fails on that one undefined symbol). Defined here,
# inline, in the stream header mpi_ops.cc includes right after declaring it, from the
# accessor TF 2.21 has for the same CUstream.
make_stream_shim() {
  local shim=$1/tensorflow/compiler/xla/stream_executor/stream.h
  mkdir -p "$(dirname "$shim")"
  cat >"$shim" <<'CPP'
// TF 2.21 compatibility for Horovod's mpi_ops.cc: see scripts/setup_gpu.sh
#include "xla/stream_executor/stream.h"
#include <cuda_runtime.h>
namespace stream_executor {
namespace gpu {
inline cudaStream_t AsGpuStreamValue(Stream* stream) {
  return static_cast<cudaStream_t>(stream->platform_specific_handle().stream);
}
}  // namespace gpu
}  // namespace stream_executor
CPP
}

cuda_tag() {  # the wheel cache's CUDA part, e.g. "cuda13.0"
  echo "cuda$(cuda_release "$CUDA_BUILD_HOME")"
}

# Prints the build's extra environment, one NAME=VALUE a line.
gpu_build_env() {
  local forwards=$CACHE/xla-forwards tf_include nccl
  make_xla_forwards "$forwards"
  make_stream_shim "$forwards"
  tf_include=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tensorflow/include
  nccl=$(nccl_link_dir)
  echo "HOROVOD_GPU_OPERATIONS=NCCL"
  echo "HOROVOD_CUDA_HOME=$CUDA_BUILD_HOME"
  echo "HOROVOD_BUILD_CUDA_CC_LIST=$(cuda_cc_list "$CUDA_BUILD_HOME")"
  echo "HOROVOD_NCCL_HOME=$nccl"
  echo "HOROVOD_NCCL_LINK=SHARED"
  # farmhash.h: TF ships it, outside its main include root.
  echo "CXXFLAGS=-iquote $forwards -I$tf_include/external/farmhash_archive/src"
  # mpi_lib.so sits in site-packages/horovod/tensorflow/; NCCL in site-packages/nvidia/.
  echo 'LDFLAGS=-Wl,-rpath,$ORIGIN/../../nvidia/nccl/lib'  # CMake escapes the $
}
