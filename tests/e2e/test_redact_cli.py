"""No credential leaves the trainer (issue 55, item 4): a URL's userinfo given in a flag
is masked in every line the CLI prints and in every file it writes (summary.json,
metrics.jsonl, TensorBoard's events), while the real URL is still the one used.

Three one-process runs (about 8-12 s each): the issue's two refused paths, and a run
that trains and checkpoints with a credential in --checkpoint_dir. TF's ram:// keeps the
userinfo as part of its key, so that run succeeds on a machine without an object store
and every sink of a finished run (the config line, the checkpoint lines, the summary,
metrics.jsonl) sees the credential."""
import sys

import numpy as np

import pytest

from helpers import run_cli

SECRET = "SuperSecret123"
TRAIN = [sys.executable, "-m", "horovod_train", "--max_steps=4", "--epochs=1",
         "--intra_op_threads=1", "--baseline_cache=", "--eval_every_epochs=0"]


def _nothing_shown(proc, run_dir):
    assert SECRET not in proc.stdout and SECRET not in proc.stderr, proc.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    leaked = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    return files


@pytest.mark.parametrize("flag,url,shown", [
    ("--data_dir", f"s3://AKIAFAKE:{SECRET}@bucket/digits", "s3://***@bucket/digits"),
    ("--checkpoint_dir", f"gs://user:{SECRET}@bucket/ck", "gs://***@bucket/ck"),
])
def test_a_refused_url_is_named_without_its_credentials(tmp_path, flag, url, shown):
    extra = ["--dataset=tfrecord"] if flag == "--data_dir" else []
    proc = run_cli(TRAIN + extra + [f"{flag}={url}", f"--run_dir={tmp_path / 'run'}"],
                   timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"horovod_train: error: {flag}") and shown in proc.stderr, last
    _nothing_shown(proc, tmp_path)


def test_a_finished_run_writes_and_prints_no_credential(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli(TRAIN + [f"--checkpoint_dir=ram://user:{SECRET}@bucket/ck",
                            "--checkpoint_every=2", "--log_every=2", f"--run_dir={run_dir}"],
                   timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The run used the real URL (it saved there) and showed the masked one.
    assert "checkpoint | wrote ram://***@bucket/ck/ckpt-" in proc.stderr, proc.stderr[-3000:]
    assert "checkpoint_dir=ram://***@bucket/ck" in proc.stderr
    names = {p.name for p in _nothing_shown(proc, run_dir)}
    assert {"summary.json", "metrics.jsonl"} <= names
    assert '"checkpoint_dir": "ram://***@bucket/ck"' in (run_dir / "summary.json").read_text()


def test_a_launch_error_cuts_the_argv_after_masking_it(tmp_path):
    """The reviewer's case: tf-config's message showed the argv's repr cut at 77
    characters, inside the password, so the URL was no longer one and its first part
    leaked. Stdlib only (about 1 s)."""
    hostfile = tmp_path / "hf"
    hostfile.write_text("localhost slots=2\n")
    url = "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY@bucket/digits"
    proc = run_cli([sys.executable, "-m", "launch", "tf-config", "--hostfile", str(hostfile),
                    "--index", "0", "--", "python", "-m", "horovod_train", f"--data_dir={url}"],
                   timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "wJalr" not in proc.stdout + proc.stderr and "AKIA" not in proc.stderr, proc.stderr
    assert "tf-config: received" in proc.stderr and "s3://***@" in proc.stderr, proc.stderr


def _corrupt_record(path, index: int, records: int) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // records * index + 20)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_data_verify_skipping_names_the_file_without_its_credentials(tmp_path):
    """`data verify --skip_corrupt` logs the damaged file's path through absl before any
    handler is set up. A local directory whose path holds `gs://u:SECRET@b/x` (the OS
    reads `//` as `/`) is a readable TFRecord set named by a credential URL, with no
    object store: convert there, damage a record, verify (about 10 s each)."""
    data = f"{tmp_path}/gs://u:{SECRET}@b/x"
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x_train=rng.random((32, 4, 4, 1), np.float32),
             y_train=rng.integers(0, 10, 32), x_test=rng.random((8, 4, 4, 1), np.float32),
             y_test=rng.integers(0, 10, 8))
    data_cli = [sys.executable, "-m", "horovod_train.data"]
    proc = run_cli(data_cli + ["convert", "--input", str(tmp_path / "d.npz"), "--output_dir",
                               data, "--num_shards=1", "--no_progress"], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _corrupt_record(tmp_path / f"gs:/u:{SECRET}@b/x/train-00000-of-00001.tfrecord", 3, 32)
    proc = run_cli(data_cli + ["verify", f"--data_dir={data}", "--skip_corrupt"], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--skip_corrupt: " in proc.stderr and "gs://***@b/x/train-" in proc.stderr, \
        proc.stderr[-3000:]
    assert SECRET not in proc.stdout + proc.stderr, proc.stderr[-3000:]
