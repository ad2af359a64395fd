"""The hostile inputs and faults that scripts/hostile_inputs.py runs, grouped like the
README's fault table. Each Case says what is run, what it may set up first, what happens
while it runs, and the exit code the contract promises."""
import os
import signal
import subprocess
import time

from hostile_inputs import HOROVODRUN, PY, ROOT, Case, Running, marked_pids


# --- the cases ----------------------------------------------------------------------------
# Setups run in this process (numpy and lmdb only, no TF); a run they need (a checkpoint to
# resume) is a subprocess like the case itself.

BASE = [PY, "-m", "horovod_train", "--epochs=1", "--intra_op_threads=1", "--eval_every_epochs=0",
        "--baseline_cache=", "--progress=lines"]
LONG = ["--epochs=1000", "--max_steps=100000"]  # runs until a fault ends it
HVD2 = [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2"]
CK = "--checkpoint_dir={tmp}/ck"


def train(*args, steps: int = 20) -> list:
    return BASE + [f"--max_steps={steps}", *args]


def flag_case(name, *args, expect=2) -> Case:
    return Case("Bad flags", name, train(*args), expect)


def a_file(name):
    def setup(ctx):
        with open(ctx.path(name), "w") as f:
            f.write("not a directory\n")
    return setup


def tmpfs(ctx, name: str, size="64k", read_only=False, full=False) -> str:
    """A real small filesystem at ctx.tmp/name (root only), unmounted after the case."""
    mnt = ctx.path(name)
    os.makedirs(mnt, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", mnt], check=True,
                   capture_output=True)
    ctx.cleanups.append(lambda: subprocess.run(["umount", "-l", mnt], capture_output=True))
    if full:
        with open(os.path.join(mnt, "ballast"), "wb", buffering=0) as f:  # nothing left to flush
            try:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
            except OSError:
                pass
    return mnt


def pre_run(ctx, argv, timeout=180):
    proc = subprocess.run(argv, env=ctx.env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {last_line(proc.stderr.splitlines(), [])}")


def checkpoints(ctx) -> list:
    ck = ctx.path("ck")
    return sorted(d for d in os.listdir(ck) if d.startswith("ckpt-")) if os.path.isdir(ck) else []


def lmdb_data(ctx, name="data", count=200, shape=(8, 8, 1), encoding="png") -> str:
    import numpy as np
    x = (np.arange(count * int(np.prod(shape))) % 251).astype(np.uint8).reshape(count, *shape)
    np.savez(ctx.path(f"{name}.npz"), x=x, y=np.arange(count) % 2)
    out = ctx.path(name)
    pre_run(ctx, [PY, "-m", "horovod_train.data", "convert", f"--input={ctx.path(name + '.npz')}",
                  f"--output_dir={out}", "--format=lmdb", f"--encoding={encoding}",
                  "--no_progress"])
    return out


def truncated_lmdb(ctx):
    out = lmdb_data(ctx, count=2000, shape=(16, 16, 1), encoding="raw")
    mdb = os.path.join(out, "train.lmdb", "data.mdb")
    os.truncate(mdb, os.path.getsize(mdb) // 2)


def garbage_image_lmdb(ctx):
    import lmdb
    from horovod_train.data import writers
    out = lmdb_data(ctx)
    env = lmdb.open(os.path.join(out, "train.lmdb"), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(writers.lmdb_key(5), writers.image_example(b"this is not an image", 1))
    env.close()


def two_checkpoints(ctx, *extra):
    pre_run(ctx, train(CK.format(tmp=ctx.tmp), "--checkpoint_every=5", *extra, steps=10))


def damage_newest(how):
    def setup(ctx):
        two_checkpoints(ctx)
        newest = ctx.path("ck", checkpoints(ctx)[-1])
        if how == "meta_list":
            with open(os.path.join(newest, "meta.json"), "w") as f:
                f.write("[1, 2, 3]\n")
        else:
            state = os.path.join(newest, "state.npz")
            os.truncate(state, os.path.getsize(state) // 2)
    return setup


def garbage_checkpoint_dirs(ctx):
    for step in (900, 800):
        os.makedirs(ctx.path("ck", f"ckpt-{step:09d}"))
        with open(ctx.path("ck", f"ckpt-{step:09d}", "meta.json"), "w") as f:
            f.write("x\n")


def fresh_checkpoints_kept(ctx):
    kept = checkpoints(ctx)
    return None if {"ckpt-000000020", "ckpt-000000030"} <= set(kept) else f"left {kept}"


def another_job_writing(ctx):
    job = Running(train(CK.format(tmp=ctx.tmp), "--checkpoint_every=5", *LONG), ctx.env(), ROOT)
    if not job.wait_for(r"train \| step", 120):
        raise RuntimeError(f"the first job did not start: {last_line(job.err, job.out)}")


def signal_when_training(sig, rank=None, pattern=r"train \| step"):
    """during: once a step line shows, send `sig` to the case (or to one rank of it)."""
    def during(ctx, run):
        if not run.wait_for(pattern, 150):
            return
        if rank is None:
            os.kill(run.proc.pid, sig)
            return
        for pid in marked_pids(ctx.mark):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"HOROVOD_RANK={rank}".encode() in env and b"horovod_train" in cmd:
                os.kill(pid, sig)
    return during


def no_process_left(ctx):
    time.sleep(10)
    left = marked_pids(ctx.mark)
    return f"{len(left)} of its processes still running 10 s later" if left else None


def a_checkpoint_written(ctx):
    return None if checkpoints(ctx) else "no checkpoint written on the way out"


def full_disk(name, full=True):
    return lambda ctx: tmpfs(ctx, name, full=full)


TF_CONFIG_TWICE = ('{{"cluster": {{"worker": ["localhost:23456", "localhost:23456"]}}, '
                   '"task": {{"type": "worker", "index": 0}}}}')

CASES = [
    flag_case("--collective_timeout_s=nan", "--collective_timeout_s=nan"),
    flag_case("--collective_timeout_s=inf", "--collective_timeout_s=inf"),
    flag_case("--collective_timeout_s=0", "--collective_timeout_s=0"),
    flag_case("--seed=-1", "--seed=-1"),
    flag_case("--seed=2**32", "--seed=4294967296"),
    flag_case("--warmup_epochs=nan", "--warmup_epochs=nan"),
    flag_case("--warmup_epochs=inf", "--warmup_epochs=inf"),
    flag_case("--momentum=2 (sgd)", "--optimizer=sgd", "--momentum=2"),
    flag_case("--learning_rate=nan", "--learning_rate=nan"),
    flag_case("--learning_rate=inf", "--learning_rate=inf"),
    flag_case("--fusion_threshold_mb=nan", "--fusion_threshold_mb=nan"),
    flag_case("--cycle_time_ms=inf", "--cycle_time_ms=inf"),
    flag_case("--baseline_samples_per_sec=-1", "--baseline_samples_per_sec=-1"),
    flag_case("--stop_grace_s=nan", "--stop_grace_s=nan"),
    Case("Bad flags", "--run_dir under a regular file", train("--run_dir={tmp}/afile/run"), 2,
         setup=a_file("afile")),
    flag_case("--checkpoint_dir=/dev/null/ck", "--checkpoint_dir=/dev/null/ck"),
    Case("Bad flags", "--checkpoint_dir is a regular file", train("--checkpoint_dir={tmp}/afile"), 2,
         setup=a_file("afile")),
    Case("Bad flags", "--checkpoint_dir on a read-only mount", train("--checkpoint_dir={tmp}/ro/ck"),
         2, setup=lambda ctx: tmpfs(ctx, "ro", read_only=True)),
    flag_case("--summary_json under a regular file", "--summary_json=/etc/hostname/s.json"),
    Case("Bad flags", "--export_weights under a regular file",
         train("--export_weights={tmp}/afile/w.npz"), 2, setup=a_file("afile")),
    Case("Bad flags", "data convert --output_dir=<a file>",
         [PY, "-m", "horovod_train.data", "convert", "--input={tmp}/a.npz",
          "--output_dir={tmp}/afile", "--no_progress"], 2,
         setup=lambda ctx: (a_file("afile")(ctx), __import__("numpy").savez(
             ctx.path("a.npz"), x=__import__("numpy").zeros((40, 4, 4, 1), "uint8"),
             y=__import__("numpy").arange(40) % 2))),

    Case("Bad data", "truncated LMDB: training", train("--dataset=lmdb", "--data_dir={tmp}/data",
                                                       "--noverify_data", steps=2), 2,
         setup=truncated_lmdb),
    Case("Bad data", "truncated LMDB: data verify",
         [PY, "-m", "horovod_train.data", "verify", "--data_dir={tmp}/data"], 2, setup=truncated_lmdb),
    Case("Bad data", "undecodable image: data verify",
         [PY, "-m", "horovod_train.data", "verify", "--data_dir={tmp}/data"], 2,
         setup=garbage_image_lmdb),
    Case("Bad data", "undecodable image: training",
         train("--dataset=lmdb", "--data_dir={tmp}/data", steps=5), 2, setup=garbage_image_lmdb),
    Case("Bad data", "undecodable image: training --skip_corrupt",
         train("--dataset=lmdb", "--data_dir={tmp}/data", "--skip_corrupt", steps=5), 0,
         setup=garbage_image_lmdb),

    Case("Checkpoints", "unreadable ckpt dirs with higher steps, keep 2",
         train(CK, "--checkpoint_every=10", "--keep_checkpoints=2", steps=30), 0,
         setup=garbage_checkpoint_dirs, verify=fresh_checkpoints_kept),
    Case("Checkpoints", "a second job on the same --checkpoint_dir",
         train(CK, "--checkpoint_every=5", steps=30), 2, setup=another_job_writing, timeout=150),
    Case("Checkpoints", "resume with another input shape",
         train("--dataset=synthetic", "--synthetic_shape=8,8,3", CK, steps=10), 2,
         setup=lambda ctx: pre_run(ctx, train("--dataset=synthetic", "--synthetic_shape=8,8,1",
                                              CK.format(tmp=ctx.tmp), "--checkpoint_every=5",
                                              steps=5))),
    Case("Checkpoints", "newest meta.json is a JSON list", train(CK, "--checkpoint_every=5", steps=15),
         0, setup=damage_newest("meta_list")),
    Case("Checkpoints", "newest state.npz truncated", train(CK, "--checkpoint_every=5", steps=15), 0,
         setup=damage_newest("truncate")),
    Case("Checkpoints", "restart after the final checkpoint",
         train(CK, "--checkpoint_every=5", steps=10), 0, setup=two_checkpoints),
    Case("Checkpoints", "resume at another world size (1 -> 2 ranks)",
         HVD2 + train(CK, "--checkpoint_every=5", steps=20), 2, setup=two_checkpoints, timeout=180),

    Case("Launch and environment", "TF_CONFIG lists one address twice", train(), 2,
         env={"TF_CONFIG": TF_CONFIG_TWICE}),
    Case("Launch and environment", "HOROVOD_RANK=abc", train(), 2,
         env={"HOROVOD_RANK": "abc", "HOROVOD_SIZE": "2"}),
    Case("Launch and environment", "OMPI_COMM_WORLD_RANK=-1", train(), 2,
         env={"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "2"}),
    Case("Launch and environment", "launch: --mwms_port_base inside the ephemeral range",
         [PY, "-m", "launch", "print", "--backend", "mwms", "-np", "2", "--mwms_port_base", "40000",
          "--", "python", "-m", "horovod_train"], 2),
    Case("Launch and environment", "python -m launch run is SIGKILLed mid-run",
         [PY, "-m", "launch", "run", "-np", "2", "-H", "localhost:2", "--",
          PY, "-m", "horovod_train", "--intra_op_threads=1", "--log_every=5", *LONG],
         -signal.SIGKILL, during=signal_when_training(signal.SIGKILL), verify=no_process_left,
         timeout=180),

    Case("Faults during a run", "--run_dir fills mid-run (64 KiB tmpfs)",
         train("--run_dir={tmp}/disk/run", "--log_every=1", steps=200), 2,
         setup=full_disk("disk", full=False)),
    Case("Faults during a run", "--summary_json on a full disk",
         train("--summary_json={tmp}/disk/summary.json", steps=5), 2, setup=full_disk("disk")),
    Case("Faults during a run", "--export_weights on a full disk",
         train("--export_weights={tmp}/disk/w.npz", steps=5), 2, setup=full_disk("disk")),
    Case("Faults during a run", "loss stays non-finite",
         train("--learning_rate=1e38", "--optimizer=sgd", "--max_nonfinite_steps=3", steps=50), 3),
    Case("Faults during a run", "SIGTERM, one process, with --checkpoint_dir",
         train(CK, "--log_every=5", *LONG), 143, during=signal_when_training(signal.SIGTERM),
         verify=a_checkpoint_written),
    Case("Faults during a run", "SIGTERM of rank 1 of 2 (horovodrun), with --checkpoint_dir",
         HVD2 + train(CK, "--log_every=5", *LONG), 143,
         during=signal_when_training(signal.SIGTERM, rank=1), verify=a_checkpoint_written,
         timeout=180),
    Case("Faults during a run", "rank 1 of 2 stalls (SIGSTOP), --collective_timeout_s=10",
         HVD2 + train("--collective_timeout_s=10", "--log_every=5", *LONG), 75,
         during=signal_when_training(signal.SIGSTOP, rank=1), timeout=180),
    Case("Faults during a run", "the chief's --run_dir fills, 2 ranks: job exits 2, not 75",
         HVD2 + train("--run_dir={tmp}/disk/run", "--log_every=1", "--epochs=20", steps=300), 2,
         setup=full_disk("disk", full=False), timeout=180),
]
