"""Starting real ranks for tests: argv builders and result readers."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np

from helpers import ROOT, child_env, run_cli
from launch.ports import free_port_base

BIN = os.path.dirname(sys.executable)
TRAIN = [sys.executable, "-m", "horovod_train"]


def horovodrun_launcher(np_: int, controller: str) -> list[str]:
    """horovodrun's argv for np_ local ranks, up to the command it starts."""
    return [os.path.join(BIN, "horovodrun"), "-np", str(np_), "-H", f"localhost:{np_}",
            f"--{controller}"]


def horovodrun(np_: int, controller: str, args) -> list[str]:
    return [*horovodrun_launcher(np_, controller), *TRAIN, *args]


def mpirun(np_: int, args) -> list[str]:
    mpirun_bin = shutil.which("mpirun") or "mpirun"
    return [mpirun_bin, "-np", str(np_), "--bind-to", "none", *TRAIN, *args]


# python -c IN_RANK_DIR BASE SCRIPT ARGS...: runs SCRIPT inside BASE/rank<N>/, N from
# horovodrun's, mpirun's or TF_CONFIG's rank, so a file a non-chief rank writes shows up
# in rank1/ (the Horovod-style script tests).
IN_RANK_DIR = ("import json, os, runpy, sys; e = os.environ; "
               "r = e.get('HOROVOD_RANK', e.get('OMPI_COMM_WORLD_RANK')) or "
               "str(json.loads(e['TF_CONFIG'])['task']['index']); "
               "d = os.path.join(sys.argv[1], 'rank' + r); os.makedirs(d, exist_ok=True); "
               "os.chdir(d); sys.argv = sys.argv[2:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")


def free_ports(n: int) -> list[int]:
    """n consecutive localhost ports, free a moment ago, below the ephemeral range (for
    MWMS workers): an OS-assigned port could be taken by a peer's outgoing connection
    before its worker binds it (launch/ports.py)."""
    base = free_port_base(n)
    return list(range(base, base + n))


def tf_config(ports, index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def run_outputs(run_dir) -> list[str]:
    """The trainer flags that write a run's summary.json and weights.npz into run_dir."""
    return [f"--summary_json={run_dir}/summary.json", f"--export_weights={run_dir}/weights.npz"]


def run_ranks(argv, run_dir, timeout=600, **env) -> dict:
    """Runs a job that writes summary.json and weights.npz into run_dir; returns the summary."""
    os.makedirs(run_dir, exist_ok=True)
    argv = argv + run_outputs(run_dir)
    proc = run_cli(argv, timeout=timeout, env=child_env(**env))
    assert proc.returncode == 0, f"job failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["_stderr"] = proc.stderr
    return summary


def run_workers(args, run_dir, n=2, timeout=600):
    """Starts n workers by hand (TF_CONFIG each), waits for all; returns the chief's summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(n)
    out = run_outputs(run_dir)
    procs = [subprocess.Popen(TRAIN + args + out, env=child_env(TF_CONFIG=tf_config(ports, i)),
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    results = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-5000:]
    return json.loads((run_dir / "summary.json").read_text()), results


def load_weights(run_dir) -> list[np.ndarray]:
    with np.load(os.path.join(run_dir, "weights.npz")) as data:
        return [data[name] for name in sorted(data.files)]


def digest_of(weights) -> str:
    h = hashlib.sha256()
    for w in weights:
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()


def assert_ranks_identical(summary, run_dir, world_size):
    """One digest per rank, all equal, and equal to the weights the chief exported."""
    digests = summary["weight_digests"]
    assert len(digests) == world_size == summary["world_size"]
    assert len(set(digests)) == 1, f"ranks diverged: {digests}"
    assert digests[0] == digest_of(load_weights(run_dir))
    assert len(summary["samples_per_sec_per_rank"]) == world_size
    assert all(rate > 0 for rate in summary["samples_per_sec_per_rank"])
    # Every rank's start-up cost (issue 46): seconds to its first step, and peak memory
    # (a process that ran TensorFlow holds well over 100 MiB).
    assert len(summary["first_step_after_s_per_rank"]) == world_size
    assert all(0 < s < 900 for s in summary["first_step_after_s_per_rank"])
    assert all(rss > 100 for rss in summary["peak_rss_mb_per_rank"])


def assert_loss_fell(summary, factor=0.5):
    losses = [loss for _, loss in summary["loss_history"]]
    assert len(losses) >= 2 and losses[-1] < factor * losses[0], losses


def only_chief_files(run_dir):
    """The run dir holds exactly what the chief writes: no second copy, no partial file."""
    assert sorted(os.listdir(run_dir)) == ["summary.json", "weights.npz"]




def start_job(argv, tag: str, **env):
    """Starts a job in the background; every rank inherits HT_TEST_TAG=tag, so the
    test can find (and kill) one rank's process by its tag and rank."""
    import subprocess
    return subprocess.Popen(argv, env=child_env(HT_TEST_TAG=tag, **env), cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def rank_pid(tag: str, rank: int, timeout: float = 120, env_match: str = "") -> int:
    """The pid of the training process with this rank (HOROVOD_RANK / OMPI / TF_CONFIG
    index), or with `env_match` ("NAME=value") in its environment, among the processes
    started with this tag."""
    import time
    want = {env_match} if env_match else \
        {f"HOROVOD_RANK={rank}", f"OMPI_COMM_WORLD_RANK={rank}", f"HT_TEST_INDEX={rank}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = set(f.read().decode(errors="replace").split("\0"))
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if f"HT_TEST_TAG={tag}" in environ and want & environ and b"horovod_train" in argv \
                    and not any(b.endswith((b"horovodrun", b"mpirun")) for b in argv):
                return int(pid)
        time.sleep(0.2)
    raise AssertionError(f"no process with rank {rank} and tag {tag} within {timeout} s")


def wait_for_path(path, timeout: float = 300, proc=None):
    """Waits until `path` exists; fails early if `proc` ends first."""
    import time
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"job ended ({proc.returncode}) before {path} appeared:\n"
                                 f"{proc.stdout.read()[-4000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.1)


def _stat(pid) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of a process from /proc/PID/stat, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the name may hold spaces
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def process_tree(root: int) -> dict[int, int]:
    """{pid: start time} of `root` and all its descendants now (by parent pid, so
    processes that left root's session or group are included)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat = _stat(pid)
        if stat:
            parents[int(pid)] = stat
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in parents and pid not in tree:
            tree[pid] = parents[pid][2]
            frontier += [child for child, (_, ppid, _) in parents.items() if ppid == pid]
    return tree


def still_running(tree: dict[int, int]) -> list[int]:
    """The pids of `tree` still running: same start time (no reused pid), not a zombie
    (an orphan's zombie waits for init to reap it; it runs nothing)."""
    running = []
    for pid, started in tree.items():
        stat = _stat(pid)
        if stat and stat[2] == started and stat[0] != "Z":
            running.append(pid)
    return running


def kill_tree(tree: dict[int, int]) -> None:
    """SIGKILL whatever of `tree` still runs (test clean-up), by pid."""
    import signal
    for pid in still_running(tree):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def rank1_trainer_hook(tmp_path, patch_source: str) -> str:
    """PYTHONPATH holding a sitecustomize that, on rank 1 only, runs `patch_source` (the
    body of `def _patch(trainer):`, dedented) on horovod_train.trainer right after it is
    imported: a fault injected into one rank without any change to the package."""
    return module_hook(tmp_path, "horovod_train.trainer", patch_source, ranks=("1",))


def module_hook(tmp_path, module: str, patch_source: str, ranks=None) -> str:
    """PYTHONPATH holding a sitecustomize that runs `patch_source` (the body of
    `def _patch(module):`, dedented; `rank`, this process's rank as a string, is in scope)
    on `module` right after it is imported, on the ranks listed (None: every rank)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    body = textwrap.indent(textwrap.dedent(patch_source).strip(), " " * 8)
    (hook / "sitecustomize.py").write_text(_HOOK.format(body=body, module=module,
                                                        ranks=repr(ranks)))
    return f"{hook}{os.pathsep}{ROOT}"


_HOOK = """\
import os
rank = os.environ.get("HOROVOD_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
if {ranks} is None or rank in {ranks}:
    import importlib.abc, importlib.util, sys

    def _patch(module):
        trainer = module  # the name the rank-1 trainer patches use
{body}

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "{module}":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            load = spec.loader.exec_module
            def exec_module(module):
                load(module)
                _patch(module)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Finder())
"""
