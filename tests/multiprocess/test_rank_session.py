"""The rank-session runner (rank_session.py) and its reader (rank_session_launch.py), on
one process that says it is rank 0 and jobs that need no TensorFlow: jobs run in order
as scripts, each from where it should and with its own argv; a job that raises or hangs
stops the session at once and the tests of the jobs it stopped fail with its traceback
or stacks, naming the job and the rank."""
import json
import os

import pytest

from helpers import ROOT
from rank_session_launch import OUT, SessionJob, start_session

# Writes what a script sees into OUT/seen.json: its argv, working directory, sys.path[0].
SEEN = """import json, os, sys
print("job says hello", flush=True)
with open(os.path.join(sys.argv[1], "seen.json"), "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
               "name": __name__}, f)
sys.exit(0)
"""


def run(tmp_path, scripts: dict, jobs) -> object:
    """Writes the scripts, then runs the jobs as rank 0 of a one-rank session."""
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
    base = tmp_path / "session"
    base.mkdir()
    return start_session(base, [], jobs, True, size=1, HOROVOD_RANK=0)


def test_jobs_run_in_order_as_their_scripts_with_their_argv_and_dirs(tmp_path):
    seen = str(tmp_path / "seen.py")
    session = run(tmp_path, {"seen.py": SEEN}, [
        SessionJob("first", seen, (OUT, "x")),
        SessionJob("in_rank_dir", seen, (OUT,), in_rank_dir=True),
        SessionJob("after", seen, (OUT,))])
    assert session.returncode == 0, session.stderr
    views = {job: json.loads((session.job_dir(job) / "seen.json").read_text())
             for job in ("first", "in_rank_dir", "after")}
    assert views["first"]["argv"] == [seen, str(session.base / "first"), "x"]
    assert {v["name"] for v in views.values()} == {"__main__"}
    assert {v["path0"] for v in views.values()} == {str(tmp_path)}
    assert views["in_rank_dir"]["cwd"] == str(session.base / "in_rank_dir" / "rank0")
    assert views["first"]["cwd"] == views["after"]["cwd"] == ROOT  # restored after a job
    assert "job says hello" in session.job_stdout("after")
    assert session.job_stdout("after").count("job says hello") == 1


def test_a_failing_job_stops_the_session_and_its_tests_fail_naming_it(tmp_path):
    seen = str(tmp_path / "seen.py")
    session = run(tmp_path, {"seen.py": SEEN,
                             "wrong.py": "raise ValueError('expected 3, got 4')\n"}, [
        SessionJob("fine", seen, (OUT,)),
        SessionJob("wrong", str(tmp_path / "wrong.py")),
        SessionJob("never", seen, (OUT,))])
    assert session.returncode == 1
    assert (session.job_dir("fine") / "seen.json").exists()  # the job before still counts
    for job in ("wrong", "never"):
        with pytest.raises(pytest.fail.Exception) as failure:
            session.job_dir(job)
        message = str(failure.value)
        assert f"job '{job}' did not finish on rank(s) [0]; the launch exited 1." in message
        assert "--- wrong.rank0.failed ---" in message
        assert "ValueError: expected 3, got 4" in message and "wrong.py" in message
    assert not os.listdir(session.base / "never")


def test_a_hung_job_ends_at_its_timeout_with_its_stack(tmp_path):
    session = run(tmp_path, {"hang.py": "import time\n\ndef wait():\n    time.sleep(120)\n\n"
                                        "wait()\n"},
                  [SessionJob("hang", str(tmp_path / "hang.py"), timeout_s=2)])
    assert session.returncode not in (0, None)
    with pytest.raises(pytest.fail.Exception) as failure:
        session.job_dir("hang")
    message = str(failure.value)
    assert "--- hang.rank0.failed ---" in message and "Timeout (0:00:02)!" in message
    assert 'hang.py", line 4 in wait' in message, message
