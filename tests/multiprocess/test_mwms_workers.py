"""Real MultiWorkerMirroredStrategy workers on localhost ports: started with TF_CONFIG and
under mpirun; identical weights, accuracy, and agreement with the horovod backend."""
import json
import os
import socket
import subprocess
import time

from helpers import ROOT, child_env
from ranks import (TRAIN, assert_loss_fell, assert_ranks_identical, free_ports,
                   load_weights, mpirun, only_chief_files, run_ranks, run_workers, tf_config)
from scenarios import REFERENCE_STEPS, assert_same_weights, reference_with


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


def test_mwms_and_horovod_compute_the_same_training(tmp_path, gloo_reference):
    """Two MWMS workers on the shared Gloo reference's flags end with its weights."""
    mwms, _ = run_workers(reference_with("--backend=mwms"), tmp_path)
    assert mwms["steps"] == gloo_reference.summary["steps"] == REFERENCE_STEPS
    assert_same_weights(load_weights(tmp_path), gloo_reference.weights(), atol=1e-5)


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
