"""Throughput of the horovod backend against mwms, same model, data and ranks, in one run.

  python bench/backends.py [--np 2] [--repeats 2] [-- extra training flags]

Runs alternate (horovod, mwms, horovod, mwms, ...) so that machine noise hits both,
and the table reports each run's samples/s (from the chief's summary, first step
excluded) and the ratio of the means.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
DEFAULT_FLAGS = ["--epochs=4", "--log_every=20", "--eval_every_epochs=0"]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_horovod(np_, flags, out):
    cmd = [os.path.join(os.path.dirname(PY), "horovodrun"), "-np", str(np_), "-H",
           f"localhost:{np_}", "--gloo", PY, "-m", "horovod_train", *flags, f"--summary_json={out}"]
    subprocess.run(cmd, env=ENV, cwd=ROOT, check=True, capture_output=True, timeout=1800)


def run_mwms(np_, flags, out):
    ports = _free_ports(np_)
    workers = [f"localhost:{p}" for p in ports]
    procs = []
    for i in range(np_):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen([PY, "-m", "horovod_train", "--backend=mwms", *flags,
                                       f"--summary_json={out}"], cwd=ROOT,
                                      env=dict(ENV, TF_CONFIG=tf_config),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"mwms worker failed:\n{err.decode()[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("flags", nargs="*", help="training flags (after --)")
    args = parser.parse_args()
    flags = args.flags or DEFAULT_FLAGS
    rates = {"horovod": [], "mwms": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name, fn in (("horovod", run_horovod), ("mwms", run_mwms)):
                out = os.path.join(tmp, f"{name}{i}.json")
                fn(args.np, flags, out)
                with open(out) as f:
                    rates[name].append(json.load(f)["samples_per_sec"])
                print(f"run {i + 1}: {name:8s} {rates[name][-1]:8.0f} samples/s", flush=True)
    means = {k: statistics.mean(v) for k, v in rates.items()}
    print(f"\n{args.np} ranks, flags {' '.join(flags)}")
    for name, mean in means.items():
        print(f"{name:8s} mean {mean:8.0f} samples/s over {len(rates[name])} runs")
    print(f"horovod / mwms throughput = {means['horovod'] / means['mwms']:.2f}")


if __name__ == "__main__":
    main()
