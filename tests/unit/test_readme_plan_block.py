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
