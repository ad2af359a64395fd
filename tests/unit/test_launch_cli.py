"""`python -m launch` end to end, in subprocesses: output, exit codes, no TF imports."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CMD = ["python", "-m", "horovod_train", "--max_steps=10"]


def launch(*args, env=None, cwd=REPO):
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True,
                          text=True, cwd=cwd, env=full_env, timeout=60)


def assert_clean_error(result, *fragments):
    """Exit 2, exactly one line on stderr, no traceback, and the expected content."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_help_works_and_imports_no_tensorflow_or_horovod():
    probe = ("import runpy, sys\n"
             "sys.argv = ['launch', '--help']\n"
             "try:\n    runpy.run_module('launch', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in\n"
             "    ('tensorflow', 'horovod', 'horovod_train', 'keras', 'numpy'))\n"
             "print('RESULT', code, heavy)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert "usage: python -m launch" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "RESULT 0 []"


def test_cli_works_when_tensorflow_cannot_even_be_imported(tmp_path):
    poison = tmp_path / "poison"
    for name in ("tensorflow", "horovod"):
        (poison / name).mkdir(parents=True)
        (poison / name / "__init__.py").write_text("raise ImportError('imported!')\n")
    env = {"PYTHONPATH": f"{poison}{os.pathsep}{REPO}"}
    for args in (["--help"], ["run", "--help"], ["slurm", "--help"],
                 ["print", "-H", "localhost:2", "--", *CMD]):
        result = launch(*args, env=env)
        assert result.returncode == 0, result.stderr


def test_print_shows_the_exact_command():
    result = launch("print", "--hostfile", "hostfiles/two_nodes", "--", *CMD)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == shlex.join(["horovodrun", "-np", "16", "-H",
                                    "node01:8,node02:8", "--gloo", *CMD])
    assert lines[0] == "# launcher: horovodrun; 1 launcher process starting 16 ranks"


def test_print_json_and_env_additions():
    result = launch("print", "--json", "--launcher", "mpirun", "-H", "n1:2,n2:2", "-np", "3",
                    "--env", "NCCL_DEBUG=INFO", "--cores_per_host", "8", "--", *CMD,
                    env={"TF_CPP_MIN_LOG_LEVEL": "1"})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    (process,) = plan["processes"]
    assert process["argv"][:3] == ["mpirun", "-np", "3"]
    assert process["argv"][-len(CMD):] == CMD
    assert process["env"]["NCCL_DEBUG"] == "INFO"
    assert process["env"]["OMP_NUM_THREADS"] == "4"  # 8 cores, 2 ranks on n1
    forwarded = {process["argv"][i + 1] for i, a in enumerate(process["argv"]) if a == "-x"}
    assert {"NCCL_DEBUG", "OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL"} <= forwarded


def test_print_mwms_local_lists_one_tf_config_per_worker():
    result = launch("print", "--backend", "mwms", "--hostfile", "hostfiles/localhost",
                    "--mwms_port_base", "31000", "--", *CMD)
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("env ")]
    assert len(commands) == 2
    words = shlex.split(commands[1])
    config = json.loads(words[1].split("=", 1)[1])
    assert config["task"]["index"] == 1
    assert config["cluster"]["worker"] == ["localhost:31000", "localhost:31001"]
    assert words[2:] == CMD


def test_dry_run_starts_nothing(tmp_path):
    marker = tmp_path / "ran"
    result = launch("run", "--dry_run", "--backend", "mwms", "-H", "localhost:1", "--",
                    "touch", str(marker))
    assert result.returncode == 0, result.stderr
    assert str(marker) in result.stdout
    assert not marker.exists()


def test_a_dry_run_shows_a_urls_credentials_masked_and_json_keeps_them():
    """Issue 55 item 4: the printed command is a log line; --json is the plan for programs."""
    url = "s3://AKIAFAKE:SuperSecret123@bucket/digits"
    args = ("run", "--dry_run", "-H", "localhost:2", "--", "python", "-m", "horovod_train",
            f"--data_dir={url}")
    shown = launch(*args)
    assert shown.returncode == 0, shown.stderr
    assert "SuperSecret123" not in shown.stdout + shown.stderr
    assert "--data_dir=s3://***@bucket/digits" in shown.stdout, shown.stdout
    planned = launch("print", "--json", *args[2:])
    assert planned.returncode == 0, planned.stderr
    assert f"--data_dir={url}" in json.loads(planned.stdout)["processes"][0]["argv"]


def test_run_local_mwms_really_starts_each_worker_with_tf_config(tmp_path):
    # Each worker writes its own file: interleaved stdout from two processes is racy.
    script = ("import json, os, sys; task = json.loads(os.environ['TF_CONFIG'])['task'];"
              "open(os.path.join(sys.argv[1], str(task['index'])), 'w').write('ok')")
    result = launch("run", "--backend", "mwms", "-H", "localhost:2", "--",
                    sys.executable, "-c", script, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]


def test_run_returns_the_failing_worker_code():
    result = launch("run", "--backend", "mwms", "-H", "localhost:1", "--",
                    sys.executable, "-c", "import sys; sys.exit(7)")
    assert result.returncode == 7


@pytest.mark.parametrize("content, where", [
    ("node01 slots=2\na;rm -rf / slots=2\n", ":2:"),
    ("$(reboot)\n", ":1:"),
    ("node01 slots=1e9\n", ":1:"),
    ("node01 slots=-1\n", ":1:"),
])
def test_hostile_hostfile_is_rejected_and_nothing_runs(tmp_path, content, where):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(content)
    marker = tmp_path / "ran"
    result = launch("run", "--backend", "mwms", "--launcher", "local", "--hostfile",
                    str(hostfile), "--", "touch", str(marker))
    line = assert_clean_error(result, f"{hostfile}{where}", "expected", "Fix: e.g.")
    assert line.startswith("python -m launch: error: ")
    assert not marker.exists()


@pytest.mark.parametrize("args, fragment", [
    (["print", "-H", "localhost:2"], "the training command after '--'"),
    (["print", "--backend", "tf", "--", *CMD], "--backend: received 'tf'; expected one of: "),
    (["print", "-np", "two", "--", *CMD], "whole number"),
    (["print", "-H", "a:2", "--hostfile", "x", "--", *CMD], "expected one of them, not both"),
    (["print", "-H", "h1\nh2", "--", *CMD], "control character"),
    (["print", "-H", "localhost:2", "-np", "3", "--", *CMD], "at most 2"),
    (["print", "--env", "NOEQUALS", "-H", "a", "--", *CMD], "NAME=VALUE"),
    (["tf-config", "--hostfile", "hostfiles/localhost", "--index", "5"], "from 0 to 1"),
    (["tf-config", "--hostfile", "hostfiles/missing"], "missing file"),
    (["slurm", "--nodes", "2", "--partition", "a b", "--", *CMD], "--partition"),
    (["nodelist", "n[1-"], "every '[' closed"),
    (["tf-config", "--index", "0", "-H", "a", "--", "x"], "no command"),
])
def test_bad_input_gives_one_line_and_exit_2(args, fragment):
    assert_clean_error(launch(*args), fragment)


def test_tf_config_subcommand():
    result = launch("tf-config", "--hostfile", "hostfiles/two_nodes", "--index", "9",
                    "--mwms_port_base", "20000")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "cluster": {"worker": [f"node0{n}:{20000 + k}" for n in (1, 2) for k in range(8)]},
        "task": {"type": "worker", "index": 9}}
    every = launch("tf-config", "-H", "a:2", "--all").stdout.splitlines()
    assert [json.loads(line)["task"]["index"] for line in every] == [0, 1]


def test_slurm_subcommand_writes_a_bash_valid_script(tmp_path):
    out = tmp_path / "job.sbatch"
    result = launch("slurm", "--nodes", "8", "--gpus-per-node", "8", "--backend", "mwms",
                    "--partition", "gpu", "--time", "02:00:00", "--job-name", "big",
                    "-o", str(out), "--", *CMD, "--data_dir", "/data/my set")
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "#SBATCH --nodes=8" in text and "#SBATCH --job-name=big" in text
    assert "'/data/my set'" in text
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0


def test_nodelist_and_hosts_subcommands():
    assert launch("nodelist", "node[01-02],gpu-[1-2]").stdout.split() == [
        "node01", "node02", "gpu-1", "gpu-2"]
    result = launch("hosts", "--nodelist", "gpu-node[001-004]", "--tasks_per_node", "8(x4)")
    body = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    expected = [line for line in (REPO / "hostfiles/slurm_generated").read_text().splitlines()
                if line and not line.startswith("#")]
    assert body == expected
    slurm = launch("hosts", "--slurm_env", "--format", "horovod",
                   env={"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "4(x2)"})
    assert slurm.stdout == "n1:4,n2:4\n"
