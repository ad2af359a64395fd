"""The GPU build, proven on a CPU-only host (issue 18): `make setup GPU=1`'s script builds
Horovod with NCCL into a venv (here one under the build cache, see _cached_venv), and that
build trains the default job on CPU.

What this shows: the NCCL build compiles and links with no manual step, its library
loads next to TF's CUDA 12 runtime, Horovod reports NCCL, and a CPU run through that
build is as correct as the CPU build's. What it cannot show without a GPU: NCCL kernels
running, GPU memory, speed.
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import time

import pytest

from helpers import ROOT, child_env, run_cli, run_setup
from ranks import assert_ranks_identical


def _cached_venv() -> str:
    """The GPU venv this test builds, under the build cache (as the Horovod wheels are),
    named by the requirements it holds: a clean clone finds it built (setup then takes
    seconds) instead of installing TF's CUDA wheels again, and a change of requirements
    gets a venv of its own. `make setup GPU=1` itself still builds .venv-gpu."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements-gpu.txt"):
        with open(os.path.join(ROOT, name), "rb") as f:
            digest.update(f.read())
    cache = os.environ.get("HOROVOD_TRAIN_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "horovod_train"))
    return os.path.join(cache, f"test-venv-gpu-{digest.hexdigest()[:12]}")


GPU_VENV = _cached_venv()
GPU_BIN = os.path.join(GPU_VENV, "bin")
SETUP_TIMEOUT_S = 45 * 60  # a first build on 2 cores: TF's CUDA wheels, then Horovod


def _gpu_env(**extra):
    env = child_env(**extra)
    env["PATH"] = GPU_BIN + os.pathsep + env["PATH"]
    return env


@pytest.fixture(scope="module")
def gpu_venv():
    if os.geteuid() != 0 and not shutil.which("nvcc"):
        pytest.skip("the GPU build needs root (apt) or a CUDA toolkit on PATH; neither here")
    for stale in glob.glob(GPU_VENV.rsplit("-", 1)[0] + "-*"):
        if stale != GPU_VENV:  # built for other requirements: gigabytes nothing will use
            shutil.rmtree(stale, ignore_errors=True)
    started = time.monotonic()
    proc = run_setup(timeout=SETUP_TIMEOUT_S, GPU="1", VENV=GPU_VENV)
    print(f"\nmake setup GPU=1: {time.monotonic() - started:.0f} s\n{proc.stdout[-1500:]}")
    return GPU_VENV


def test_check_build_lists_nccl_with_tensorflow_mpi_and_gloo(gpu_venv):
    proc = run_cli([os.path.join(GPU_BIN, "horovodrun"), "--check-build"], env=_gpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("TensorFlow", "MPI", "Gloo", "NCCL"):
        assert f"[X] {name}" in proc.stdout, proc.stdout


def test_nccl_built_with_no_gpu_present(gpu_venv):
    code = ("import json, tensorflow as tf, horovod.tensorflow as hvd; hvd.init(); "
            "print(json.dumps({'nccl': bool(hvd.nccl_built()), 'cuda': bool(hvd.cuda_built()), "
            "'gpus': len(tf.config.list_physical_devices('GPU')), "
            "'tf_cuda': tf.test.is_built_with_cuda()}))")
    proc = run_cli([os.path.join(GPU_BIN, "python"), "-c", code], env=_gpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"nccl": True, "cuda": True, "gpus": 0, "tf_cuda": True}, seen


def test_the_library_links_the_venvs_nccl(gpu_venv):
    """NCCL is linked, shared, and found in the venv through the wheel's own RUNPATH."""
    code = ("import glob, os, horovod; print(*glob.glob(os.path.join("
            "os.path.dirname(horovod.__file__), 'tensorflow', 'mpi_lib*.so')))")
    proc = run_cli([os.path.join(GPU_BIN, "python"), "-c", code], env=_gpu_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    library = proc.stdout.strip().splitlines()[-1]
    assert os.path.isfile(library), proc.stdout
    ldd = subprocess.run(["ldd", library], capture_output=True, text=True, check=True).stdout
    nccl = [line for line in ldd.splitlines() if "libnccl.so" in line]
    assert nccl and os.path.join(GPU_VENV, "lib") in os.path.realpath(nccl[0].split()[2]), ldd


def _train(argv, run_dir):
    os.makedirs(run_dir, exist_ok=True)
    argv = argv + [f"--summary_json={run_dir}/summary.json",
                   f"--export_weights={run_dir}/weights.npz"]
    proc = run_cli(argv, timeout=900, env=_gpu_env())
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-5000:]}"
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def test_the_gpu_build_trains_the_default_job_on_cpu(gpu_venv, tmp_path):
    """The default job but for its length: 3 of its 10 epochs reach the accuracy bar."""
    python = os.path.join(GPU_BIN, "python")
    one = _train([python, "-m", "horovod_train", "--backend=horovod", "--epochs=3"],
                 str(tmp_path / "one"))
    two = _train([os.path.join(GPU_BIN, "horovodrun"), "-np", "2", "-H", "localhost:2",
                  "--gloo", python, "-m", "horovod_train", "--epochs=3"], str(tmp_path / "two"))
    assert one["world_size"] == 1 and one["test_accuracy"] >= 0.95, one
    assert_ranks_identical(two, str(tmp_path / "two"), 2)
    assert two["test_accuracy"] >= 0.95, two
