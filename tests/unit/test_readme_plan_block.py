"""The README's planner example is the planner's real output: the block is re-run."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```console\n\$ python (-m horovod_train plan [^\n]*)\n(.*?)```", re.S)


def test_readme_plan_block_matches_the_planner():
    blocks = BLOCK.findall((REPO / "README.md").read_text())
    assert blocks, "README.md shows no planner example"
    for command, expected in blocks:
        result = subprocess.run([sys.executable, *shlex.split(command)], capture_output=True,
                                text=True, cwd=REPO, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected


def test_readme_plan_is_the_trainers_default_allreduce():
    """The README's plan leaves --allreduce_bucket_mb to its default, which must be the
    trainer's (horovod_train/config.py): the block's output is the same with the trainer's
    default passed explicitly, and says the allreduce overlaps backprop."""
    from horovod_train.config import DEFAULT_BUCKET_MB
    assert DEFAULT_BUCKET_MB > 0
    for command, expected in BLOCK.findall((REPO / "README.md").read_text()):
        assert "bucket" not in command, "the README's plan should show the default"
        assert "\nallreduce: overlapped with backprop," in expected
        explicit = subprocess.run(
            [sys.executable, *shlex.split(command), "--allreduce_bucket_mb",
             f"{DEFAULT_BUCKET_MB:g}"], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert explicit.returncode == 0, explicit.stderr
        assert explicit.stdout == expected
