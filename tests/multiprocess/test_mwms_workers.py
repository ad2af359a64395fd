"""Real MultiWorkerMirroredStrategy workers on localhost ports: started with TF_CONFIG and
under mpirun; identical weights, accuracy, and agreement with the horovod backend."""
import json
import os
import socket
import subprocess
import time

import numpy as np
import pytest

from helpers import ROOT, child_env
from ranks import (TRAIN, assert_loss_fell, assert_ranks_identical, free_ports, horovodrun,
                   load_weights, mpirun, only_chief_files, run_ranks, tf_config)

pytestmark = pytest.mark.slow


def run_workers(args, run_dir, n=2, timeout=600):
    """Starts n workers by hand (TF_CONFIG each), waits for all; returns the chief's summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(n)
    out = [f"--summary_json={run_dir}/summary.json", f"--export_weights={run_dir}/weights.npz"]
    procs = [subprocess.Popen(TRAIN + args + out, env=child_env(TF_CONFIG=tf_config(ports, i)),
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    results = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-5000:]
    return json.loads((run_dir / "summary.json").read_text()), results


def test_default_job_on_two_tf_config_workers(tmp_path):
    """No --backend flag: auto must pick mwms from TF_CONFIG alone. The default job but for
    its length: 3 of the 10 epochs already reach the accuracy bar."""
    summary, _ = run_workers(["--epochs=3"], tmp_path)
    assert summary["epochs"] == 3
    assert summary["backend"] == "mwms" and summary["world_size"] == 2
    assert summary["test_accuracy"] >= 0.95
    assert_ranks_identical(summary, tmp_path, 2)
    assert_loss_fell(summary)
    only_chief_files(tmp_path)


def test_workers_under_mpirun_derive_tf_config(tmp_path):
    summary = run_ranks(mpirun(2, ["--backend=mwms", "--epochs=2", "--log_every=10",
                                   f"--mwms_port_base={free_ports(2)[0]}"]), tmp_path)
    assert summary["backend"] == "mwms" and summary["world_size"] == 2
    assert_ranks_identical(summary, tmp_path, 2)
    assert summary["test_accuracy"] >= 0.9


def test_mwms_and_horovod_compute_the_same_training(tmp_path):
    pytest.importorskip("horovod.tensorflow")
    args = ["--optimizer=sgd", "--learning_rate=0.05", "--max_steps=30", "--log_every=10",
            "--eval_every_epochs=0", "--deterministic"]
    mwms, _ = run_workers(args + ["--backend=mwms"], tmp_path / "mwms")
    hvd = run_ranks(horovodrun(2, "gloo", args), tmp_path / "hvd")
    assert mwms["steps"] == hvd["steps"] == 30
    for a, b in zip(load_weights(tmp_path / "mwms"), load_weights(tmp_path / "hvd")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_malformed_tf_config_names_the_field():
    bad = json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                      "task": {"type": "worker", "index": 5}})
    proc = subprocess.run(TRAIN + ["--max_steps=1"], env=child_env(TF_CONFIG=bad), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "task.index" in proc.stderr and "received 5" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_peer_fails_within_the_timeout_naming_it():
    ports = free_ports(2)
    start = time.monotonic()
    proc = subprocess.run(TRAIN + ["--max_steps=1", "--collective_timeout_s=5"],
                          env=child_env(TF_CONFIG=tf_config(ports, 0)), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"localhost:{ports[1]}" in proc.stderr and "cannot reach" in proc.stderr
    assert time.monotonic() - start < 120  # startup + 5 s, never a hang


def test_port_in_use_is_named():
    """Named within the start-up time, not after --collective_timeout_s (issue 46: 306 s
    of silence with the default)."""
    ports = free_ports(2)
    start = time.monotonic()
    with socket.socket() as holder:
        holder.bind(("", ports[0]))
        holder.listen(1)
        proc = subprocess.run(TRAIN + ["--max_steps=1", "--collective_timeout_s=300"],
                              env=child_env(TF_CONFIG=tf_config(ports, 0)), cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
    assert time.monotonic() - start < 120, "waited out the timeout instead of naming the holder"
    assert proc.returncode == 2
    assert f"port {ports[0]}" in proc.stderr and "in use" in proc.stderr
    assert "cluster.worker[0]" in proc.stderr
    assert f"held by pid {os.getpid()}" in proc.stderr  # this test holds it (issue 17 item 15)
