"""A rank session: one launch runs several test worker scripts in turn, in the same
rank processes (tests/multiprocess/conftest.py's session fixtures start it).

    horovodrun -np 2 -H localhost:2 --gloo python rank_session.py SESSION_DIR/session.json

A launch costs each rank its TensorFlow import and start-up (10-15 s on 2 cores); the
behaviour the workers check takes well under a second. So the scripts that need ranks but
no launch of their own share one. session.json (write_spec) lists the jobs: a name, a
script, its argv, its output dir, its timeout and whether it runs inside <dir>/rank<N>/
(for the scripts whose files must show which rank wrote them). Each job runs as
`python SCRIPT ARGV...` would: runpy.run_path(run_name="__main__"), sys.argv and
sys.path[0] set for it, the working directory restored after it.

Every rank leaves SESSION_DIR/<job>.rank<N>.done after a job that returned, so a test
knows its job finished on every rank. A job that raises, or passes its timeout (a hung
collective: faulthandler's watchdog, which fires even while the main thread waits inside
a native call), leaves SESSION_DIR/<job>.rank<N>.failed with the traceback or every
thread's stack, and the rank exits 1 at once: its peers would otherwise meet the next
job's collectives out of step. The launcher then ends the others, and the tests of the
jobs that never finished fail with that file's text.

Between jobs, what a fresh process would not carry over (checked for the jobs
conftest.py lists; a new job's author checks the same):
- Keras' global state: layer-name counters, the global dtype policy, its seed generator
  (keras.backend.clear_session). Every job that draws random numbers seeds them itself.
- The joined htk.Strategy (horovod_train.keras.state.reset(), which exists for this), so
  each job's hvd.init() or htk.Strategy(...) joins with its own options (one job asks
  for intra_op_threads=1) and its own tape guards (a tape job's recorded divergence
  verdict must not reach a later hvd.elastic.run). Horovod itself stays initialised
  (hvd.init() again is a no-op there); the loop worker's shutdown/init rounds go last.
  Under MWMS the strategy cannot be joined twice (TF configures its collectives once per
  process, and the server holds the port a second rendezvous would bind), so an MWMS
  session keeps the first job's strategy ("rejoin": false) and its jobs join through it.
- TensorFlow's thread pools are fixed at its first op: a later job asking for other
  counts gets a warning and the pools as they are (runtime.configure_threads). The
  sessions set TF_NUM_INTRAOP_THREADS=1, so the first job's pools have the one thread
  the others ask for (keras_accumulation_worker's intra_op_threads=1), and TF takes the
  same value again without a word: the request holds as in a launch of its own.
- TensorFlow's op determinism: a trainer job with --deterministic turns it on for the
  process, and a later job without the flag must run as a fresh process would (off).
- The working directory, sys.argv and sys.path[0] are restored after each job. os.environ
  is not: the MWMS jobs read the TF_CONFIG the first one resolved, and a trainer job's
  CPU defaults (horovod_train/backends/horovod.py) stay set, so a later trainer job runs
  with the same values but no longer says "CPU defaults chosen" (no session job checks
  that line; test_stock_horovod's launch does).

Only the standard library here: the ranks load TensorFlow through the jobs.
"""
import faulthandler
import json
import os
import runpy
import sys
import time
import traceback

MARK = "rank_session |"


def write_spec(path, jobs: list[dict], rejoin: bool) -> None:
    """session.json: {"rejoin": bool, "jobs": [{name, script, argv, dir, timeout_s,
    in_rank_dir}, ...]}; done and failed files go next to it."""
    with open(path, "w") as f:
        json.dump({"rejoin": rejoin, "jobs": jobs}, f, indent=1)


def done_file(session_dir, name: str, rank) -> str:
    return os.path.join(session_dir, f"{name}.rank{rank}.done")


def failed_file(session_dir, name: str, rank) -> str:
    return os.path.join(session_dir, f"{name}.rank{rank}.failed")


def begin_line(name: str, rank) -> str:
    return f"{MARK} begin {name} | rank {rank}"


def end_line(name: str, rank) -> str:
    return f"{MARK} end {name} | rank {rank}"


def this_rank(environ) -> str:
    """The rank from horovodrun's, Open MPI's or TF_CONFIG's variables."""
    rank = environ.get("HOROVOD_RANK") or environ.get("OMPI_COMM_WORLD_RANK")
    return rank or str(json.loads(environ["TF_CONFIG"])["task"]["index"])


def run_job(job: dict, rank: str) -> None:
    """The job's script as `python SCRIPT ARGV...` would run it; exit 0 is success."""
    where = os.path.join(job["dir"], f"rank{rank}") if job["in_rank_dir"] else os.getcwd()
    os.makedirs(where, exist_ok=True)
    cwd, argv, path0 = os.getcwd(), sys.argv, sys.path[0]
    os.chdir(where)
    sys.argv = [job["script"], *job["argv"]]
    sys.path[0] = os.path.dirname(os.path.abspath(job["script"]))
    try:
        runpy.run_path(job["script"], run_name="__main__")
    except SystemExit as end:
        if end.code not in (None, 0):
            raise
    finally:
        os.chdir(cwd)
        sys.argv, sys.path[0] = argv, path0


def fresh_start(rejoin: bool) -> None:
    """What a new process would not hold (the module docstring lists it)."""
    keras = sys.modules.get("keras")
    if keras is not None:
        keras.backend.clear_session()
    if "tensorflow" in sys.modules:
        # TF exports enable_op_determinism only; its framework module has the inverse.
        from tensorflow.python.framework import config as tf_framework_config
        tf_framework_config.disable_op_determinism()
    state = sys.modules.get("horovod_train.keras.state")
    if rejoin and state is not None:
        state.reset()


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    session_dir, rank = os.path.dirname(os.path.abspath(spec_path)), this_rank(os.environ)
    for job in spec["jobs"]:
        name = job["name"]
        print(begin_line(name, rank), flush=True)
        start = time.monotonic()
        failed = open(failed_file(session_dir, name, rank), "w")
        faulthandler.dump_traceback_later(job["timeout_s"], exit=True, file=failed)
        try:
            run_job(job, rank)
            fresh_start(spec["rejoin"])
        except BaseException:  # noqa: BLE001 - any end but a clean one stops the session
            faulthandler.cancel_dump_traceback_later()
            failed.write(traceback.format_exc())
            failed.close()
            sys.stderr.write(f"{MARK} job {name} failed on rank {rank}:\n"
                             f"{traceback.format_exc()}")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        faulthandler.cancel_dump_traceback_later()
        failed.close()
        os.remove(failed_file(session_dir, name, rank))
        open(done_file(session_dir, name, rank), "w").close()
        print(f"{end_line(name, rank)} | {time.monotonic() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
