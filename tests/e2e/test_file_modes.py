"""Everything the chief writes honours the umask (issue 22, part 6): a teammate on a
shared cluster can read a run's summary, weights, metrics, checkpoints and plots when
the user's umask says so. Atomic writes through mkstemp/mkdtemp used to leave files
0600 and checkpoint directories 0700 whatever the umask."""
import os
import stat
import subprocess
import sys

import pytest

from helpers import ROOT, child_env

TRAIN = [sys.executable, "-m", "horovod_train", "--max_steps=4", "--epochs=1",
         "--intra_op_threads=1", "--checkpoint_every=2", "--log_every=2"]


def _run(args, umask, timeout=300):
    # Popen's umask= sets it in the child only: this process's umask stays as it was.
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, umask=umask,
                          env=child_env(), cwd=ROOT, stdin=subprocess.DEVNULL)


def _modes(top):
    """{path: permission bits} of `top` and everything below it."""
    found = {str(top): stat.S_IMODE(os.stat(top).st_mode)}
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(parent, name)
            found[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


def _wrong(top, umask, private=()):
    """The paths whose mode is not what the umask gives; under `private` (RUN/stacks, owner-
    only whatever the umask: issue 55), not 0700 for the directory and 0600 for its files."""
    want_file, want_dir = 0o666 & ~umask, 0o777 & ~umask
    wrong = {}
    for path, mode in _modes(top).items():
        mine = any(path == str(p) or path.startswith(f"{p}{os.sep}") for p in private)
        want = (0o700 if mine else want_dir) if os.path.isdir(path) else \
            (0o600 if mine else want_file)
        if mode != want:
            wrong[path] = oct(mode)
    return wrong


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_training_run_writes_what_the_umask_allows(tmp_path, umask):
    out = tmp_path / "out"
    run_dir, ckpt, weights = out / "run", out / "ckpt", out / "weights" / "final.npz"
    baselines = out / "cache" / "baselines.json"
    proc = _run(TRAIN + [f"--run_dir={run_dir}", f"--checkpoint_dir={ckpt}",
                         f"--export_weights={weights}", f"--baseline_cache={baselines}",
                         "--profile_steps=2,3", "--profiler=tf"], umask)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _run([sys.executable, "-m", "horovod_train.report", str(run_dir)], umask, timeout=120)
    assert report.returncode == 0, report.stderr[-3000:]
    # What the run must have written, so that the mode check below covers each of them.
    for path in (run_dir / "summary.json", run_dir / "metrics.jsonl", weights, baselines,
                 run_dir / "throughput.png", run_dir / "breakdown.png"):
        assert path.is_file(), sorted(_modes(out))
    checkpoints = sorted(p for p in ckpt.iterdir() if p.name.startswith("ckpt-"))
    assert checkpoints and (checkpoints[-1] / "state.npz").is_file(), sorted(_modes(ckpt))
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tb").iterdir())
    assert list((run_dir / "profile").rglob("*.xplane.pb")), sorted(_modes(run_dir))
    assert (run_dir / "stacks" / "rank0.txt").is_file(), sorted(_modes(run_dir))
    assert _wrong(out, umask, private=[run_dir / "stacks"]) == {}
