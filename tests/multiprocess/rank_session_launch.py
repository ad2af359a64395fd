"""Starting a rank session (rank_session.py runs it inside the ranks) and reading what
its jobs left: the test side, for conftest.py's session fixtures."""
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import rank_session
from helpers import ROOT, child_env, run_cli
from ranks import run_outputs
from scenarios import Job

HERE = pathlib.Path(__file__).parent
OUT = "{out}"  # in a job's argv: its own output dir


@dataclasses.dataclass(frozen=True)
class SessionJob:
    """One worker script of a rank session; timeout_s is what its own launch had."""
    name: str
    script: str  # relative to this directory
    argv: tuple = ()
    timeout_s: float = 300
    in_rank_dir: bool = False  # run inside <out>/rank<N>/


def trainer_job(name: str, flags, timeout_s: float = 300) -> SessionJob:
    """A training run as a session job (trainer_job.py): `python -m horovod_train FLAGS`
    with its summary and weights in the job's dir."""
    return SessionJob(name, "trainer_job.py", (OUT, *flags, *run_outputs(OUT)), timeout_s)


@dataclasses.dataclass(frozen=True)
class RankSession:
    """A finished rank session: its directory (a dir per job) and the launch's output."""
    base: pathlib.Path
    size: int
    jobs: tuple
    returncode: int | None  # None: the launch passed its timeout
    stdout: str
    stderr: str

    def job_dir(self, name: str) -> pathlib.Path:
        """Where `name` wrote, once it finished on every rank; else the test fails with
        the failing job's traceback (or stacks, at a timeout) and the launch's last lines."""
        unfinished = [r for r in range(self.size) if not self._done(name, r)]
        if unfinished:
            said = "".join(f"\n--- {p.name} (end) ---\n{p.read_text()[-3000:]}"
                           for p in self._stderr_files(name))
            pytest.fail(self._why(f"job {name!r} did not finish on rank(s) {unfinished}")
                        + said, pytrace=False)
        if self.returncode != 0 and all(self._done(j, r) for j in self.jobs
                                        for r in range(self.size)):
            pytest.fail(self._why("every job finished on every rank"), pytrace=False)
        return self.base / name

    def job_stdout(self, name: str) -> str:
        """Every line the ranks printed during `name`. Where the launcher prefixes each
        rank's lines ("[1]<stdout>:" under horovodrun --gloo), exactly: for each rank, its
        lines from its begin line to its end line, rank 0's first. Where it does not (the
        MWMS launcher), the lines from the first rank's begin to the last rank's end, which
        may hold a neighbouring job's last or first lines."""
        lines = self.stdout.splitlines()
        spans = [self._span(lines, name, rank) for rank in range(self.size)]
        if any(not tag for tag, _, _ in spans):
            return "\n".join(lines[min(s for _, s, _ in spans):max(e for _, _, e in spans) + 1])
        out = []
        for tag, start, stop in spans:
            out += [line for line in lines[start:stop + 1] if line.startswith(tag)]
        return "\n".join(out)

    def _span(self, lines, name, rank) -> tuple[str, int, int]:
        """(the launcher's prefix of this rank's lines, the index of its begin line, of its
        end line) for job `name`."""
        # Under mpirun a line may end in the next chunk's prefix: "...| rank 1[1,1]<stdout>:".
        begin = re.compile(re.escape(rank_session.begin_line(name, rank)) + r"(?!\d)")
        end = rank_session.end_line(name, rank) + " |"
        first = next((i for i, line in enumerate(lines) if begin.search(line)), None)
        assert first is not None, self._why(f"no begin line of job {name!r} on rank {rank}")
        tag = lines[first][:begin.search(lines[first]).start()]
        last = next((i for i in range(first, len(lines))
                     if end in lines[i] and lines[i].startswith(tag)), None)
        assert last is not None, self._why(f"no end line of job {name!r} on rank {rank}")
        return tag, first, last

    def trainer_run(self, name: str) -> Job:
        """A trainer job's run as run_ranks returns a launch's: its summary, with every
        rank's stderr during the job as "_stderr", and its run dir."""
        run_dir = self.job_dir(name)
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["_stderr"] = "".join(p.read_text() for p in self._stderr_files(name))
        return Job(summary, run_dir)

    def job_argv(self, name: str) -> list[str]:
        """The argv `name` ran with (session.json)."""
        spec = json.loads((self.base / "session.json").read_text())
        return next(job["argv"] for job in spec["jobs"] if job["name"] == name)

    def _stderr_files(self, name: str) -> list[pathlib.Path]:
        return sorted(self.base.glob(f"{name}.stderr.rank*"))  # trainer_job.py writes them

    def _done(self, name, rank) -> bool:
        return os.path.exists(rank_session.done_file(self.base, name, rank))

    def _why(self, head: str) -> str:
        launch = "passed its timeout" if self.returncode is None else \
            f"exited {self.returncode}"
        stopped = "(empty: this rank was stopped inside the job)"
        failures = [f"--- {p.name} ---\n{p.read_text() or stopped}"
                    for p in sorted(self.base.glob("*.failed"))]
        return (f"rank session {self.base.name}: {head}; the launch {launch}.\n"
                + ("\n".join(failures) or "No job recorded a failure.")
                + f"\n--- launch stdout (end) ---\n{self.stdout[-2000:]}"
                + f"\n--- launch stderr (end) ---\n{self.stderr[-4000:]}")


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def start_session(base: pathlib.Path, launcher, jobs, rejoin: bool, size: int = 2,
                  **env) -> RankSession:
    """Runs `jobs` in one launch of `launcher` (`size` ranks) with the session dir `base`.
    Each job ends at its own timeout inside the ranks (rank_session.py); the launch as a
    whole waits for them all, and a minute more for its start and end."""
    spec = []
    for job in jobs:
        out = base / job.name
        out.mkdir()
        spec.append({"name": job.name, "script": str(HERE / job.script),
                     "argv": [arg.replace(OUT, str(out)) for arg in job.argv],
                     "dir": str(out), "timeout_s": job.timeout_s,
                     "in_rank_dir": job.in_rank_dir})
    rank_session.write_spec(base / "session.json", spec, rejoin)
    argv = [*launcher, sys.executable, str(HERE / "rank_session.py"), str(base / "session.json")]
    try:
        timeout = sum(job.timeout_s for job in jobs) + 60
        proc = run_cli(argv, timeout=timeout, env=child_env(**env), cwd=ROOT)
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as late:
        returncode, stdout, stderr = None, _text(late.stdout), _text(late.stderr)
    return RankSession(base, size, tuple(job.name for job in jobs), returncode, stdout, stderr)
