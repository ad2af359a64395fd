"""`python -m launch run` under a real mpirun: what the launcher forwards (threads per rank,
the host list, the user's --env, a variable the user's shell set) reaches every rank.
(Moved from tests/unit: it starts real ranks, so its tier is this directory's.)"""
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT, child_env


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI mpirun is not installed")
def test_real_mpirun_ranks_receive_the_forwarded_env(tmp_path):
    # Each rank writes its own file: interleaved stdout from two ranks is racy.
    script = ("import os, sys; e = os.environ;"
              "path = os.path.join(sys.argv[1], e['OMPI_COMM_WORLD_RANK']);"
              "open(path, 'w').write(' '.join([e['OMP_NUM_THREADS'], e['HOROVOD_TRAIN_HOSTS'],"
              " e['MY_SETTING'], e['NCCL_DEBUG']]))")
    result = subprocess.run(
        [sys.executable, "-m", "launch", "run", "--backend", "mwms", "--launcher", "mpirun",
         "-H", "localhost:2", "--cores_per_host", "4", "--env", "MY_SETTING=a b", "--",
         sys.executable, "-c", script, str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=child_env(NCCL_DEBUG="WARN"), timeout=120)
    assert result.returncode == 0, result.stderr
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert seen == {"0": "2 localhost:2 a b WARN", "1": "2 localhost:2 a b WARN"}
