"""No credential leaves the trainer (issue 55, item 4): a URL's userinfo given in a flag
is masked in every line the CLI prints and in every file it writes (summary.json,
metrics.jsonl, TensorBoard's events), while the real URL is still the one used.

Three one-process runs (about 8-12 s each): the issue's two refused paths, and a run
that trains and checkpoints with a credential in --checkpoint_dir. TF's ram:// keeps the
userinfo as part of its key, so that run succeeds on a machine without an object store
and every sink of a finished run (the config line, the checkpoint lines, the summary,
metrics.jsonl) sees the credential."""
import sys

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
