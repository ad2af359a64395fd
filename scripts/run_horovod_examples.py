"""Runs Horovod's two TF2 Keras examples, barely mended, on 2 ranks, and checks the result.

    python scripts/run_horovod_examples.py --horovod_repo DIR              # ours
    python scripts/run_horovod_examples.py --horovod_repo DIR --against horovod.tensorflow.keras
    python scripts/run_horovod_examples.py --horovod_repo DIR --full       # mnist's 24 epochs

DIR is a (bare) git directory of Horovod. examples/tensorflow2/tensorflow2_keras_mnist.py
and tensorflow2_keras_synthetic_benchmark.py are extracted into a temporary directory and
mended there by the named rewrites of mends_for(), each of which must match exactly once:

  * the Horovod import becomes `import horovod_train.keras as hvd` (or --against);
  * compile(experimental_run_tf_function=False) goes: Keras 3's compile() raises
    TypeError on it (the only Keras 3 refusal the two scripts hit);
  * mnist only, unless --full: its fit line's 24 epochs x 500 // size steps become
    --mnist_epochs x --mnist_steps // size (the script exposes no flag; 24 x 250 steps of
    its conv net at 0.43 s a step on 2 ranks sharing 2 cores take ~45 min per run).

The benchmark is shrunk by its own flags (--bench_flags). Nothing else of the scripts
changes; the diff of every mend is printed with its changed-line count.

Data: the mnist example calls mnist.load_data(path='mnist-%d.npz' % hvd.rank()), which
looks in $KERAS_HOME/datasets/ before downloading. We write mnist-<rank>.npz there, built
from scikit-learn's digits, under a temporary KERAS_HOME. Keras also checks the file's
sha256 against the real MNIST's and would re-download a stand-in (no network: the run
fails), so the rank entry point waives that check for the files we wrote, by path, and
for nothing else: the script's data code stays untouched.

Each rank runs through a rank entry point of ours (RANK_MAIN, written to the temp dir):
it chdirs into <case>/rank<N>/ (a file a non-chief rank writes shows up in rank1/), and,
as an observer only, at exit digests the weights of every Keras model still alive into
<case>/weights-rank<N>.json. Then the table: exit code, accuracy, checkpoint files per
rank, whether the chief's last checkpoint holds its final weights, and the ranks' digests.

Exit code: 0 when every case passed its checks, 1 otherwise, 2 on bad input.
"""
import argparse
import difflib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(PY), "horovodrun")
NP = 2
EXAMPLES = {
    "mnist": "examples/tensorflow2/tensorflow2_keras_mnist.py",
    "synthetic": "examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py",
}
HOROVOD_IMPORT = "import horovod.tensorflow.keras as hvd"
STANDINS_VAR = "RUN_HOROVOD_EXAMPLES_STANDINS"  # os.pathsep-separated absolute paths

# The rank entry point: argv = CASE_DIR SCRIPT ARGS... Our code, not Horovod's.
RANK_MAIN = r'''
import atexit, gc, hashlib, json, os, runpy, sys

RANK = os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
CASE = os.path.abspath(sys.argv[1])
STANDINS = {os.path.realpath(p) for p in os.environ.get("%(var)s", "").split(os.pathsep) if p}
_kept = []  # models seen at a full collection: alive until the exit hook digests them


def _models():
    model = getattr(sys.modules.get("keras"), "Model", None)  # None while keras imports
    if not isinstance(model, type):
        return []
    return [o for o in gc.get_objects() if issubclass(type(o), model)]


def _keep_models(phase, info):
    # A model local to the example's main() may only be held by reference cycles once
    # main() returns; a full collection before exit would free it unseen.
    if phase == "start" and info["generation"] == 2:
        _kept[:] = list({id(m): m for m in _models() + _kept}.values())


def _digest(variables):
    h = hashlib.sha256()
    for v in variables:
        h.update(v.numpy().tobytes())
    return h.hexdigest()


def _write_digests():
    models = []
    for m in {id(m): m for m in _models() + _kept}.values():
        opt = getattr(m, "optimizer", None)
        steps = int(opt.iterations.numpy()) if opt is not None and m.built else 0
        models.append({"name": m.name, "class": type(m).__name__, "built": m.built,
                       "steps": steps, "weights": _digest(m.weights),
                       "trainable": _digest(m.trainable_weights),
                       "each": [[getattr(v, "path", v.name), _digest([v])[:16]]
                                for v in m.weights]})
    with open(os.path.join(CASE, "weights-rank%%s.json" %% RANK), "w") as f:
        json.dump({"rank": int(RANK), "models": models}, f, indent=1)


class _TrustStandIns:
    """Import hook: once keras.src.utils.file_utils loads, its sha256 check passes the
    stand-in files we wrote (by real path) and checks every other file as before."""

    def find_spec(self, name, path=None, target=None):
        if name != "keras.src.utils.file_utils":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = module.validate_file
            module.validate_file = lambda fpath, *a, **k: (
                os.path.realpath(fpath) in STANDINS or real(fpath, *a, **k))
        spec.loader.exec_module = exec_module
        return spec


if STANDINS:
    sys.meta_path.insert(0, _TrustStandIns())
gc.callbacks.append(_keep_models)
atexit.register(_write_digests)  # first registered, so it runs after Horovod's own hooks
rank_dir = os.path.join(CASE, "rank" + RANK)
os.makedirs(rank_dir, exist_ok=True)
os.chdir(rank_dir)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
''' % {"var": STANDINS_VAR}


def mends_for(example, args):
    """[(why, old, new)]: the rewrites of one example, each to match exactly once."""
    mends = []
    if args.against != "horovod.tensorflow.keras":
        mends.append(("the import: our Keras 3 API under Horovod's name", HOROVOD_IMPORT,
                      f"import {args.against} as hvd"))
    mends.append(("Keras 3 compile() raises TypeError on this Keras 2 argument",
                  "experimental_run_tf_function=False)", ")"))
    if example == "mnist" and not args.full:
        mends.append(("run length: 24 epochs x 500 // size steps take ~45 min on 2 cores",
                      "steps_per_epoch=500 // hvd.size(), callbacks=callbacks, epochs=24,",
                      f"steps_per_epoch={args.mnist_steps} // hvd.size(), callbacks=callbacks, "
                      f"epochs={args.mnist_epochs},"))
    return mends


def bad_input(message):
    print(message, file=sys.stderr)
    raise SystemExit(2)


def apply_mends(text, mends):
    for why, old, new in mends:
        count = text.count(old)
        if count != 1:  # the example changed upstream: a mend must never guess
            bad_input(f"mend {why!r}: {old!r} occurs {count} times (expected once)")
        text = text.replace(old, new)
    return text


def diff_of(name, before, after):
    """("N (-removed/+added)" lines, unified diff text)."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(),
                                     f"a/{name}", f"b/{name}", n=0, lineterm=""))
    body = [line for line in diff if line[:3] not in ("+++", "---")]
    removed = sum(1 for line in body if line.startswith("-"))
    added = sum(1 for line in body if line.startswith("+"))
    return f"{max(removed, added)} (-{removed}/+{added})", "\n".join(diff)


def extract(repo, rev, path):
    proc = subprocess.run(["git", "--git-dir", repo, "show", f"{rev}:{path}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        bad_input(f"cannot read {path} at {rev} from {repo}: {proc.stderr.strip()}")
    return proc.stdout


def write_digits_standins(keras_home, ranks):
    """mnist-<rank>.npz for every rank, from scikit-learn's digits: 8x8 (0..16) scaled to
    0..255 and upscaled 3x with a 2-pixel border to MNIST's 28x28 uint8, the keys
    mnist.load_data reads. Every rank gets the whole set, as with the real download."""
    import numpy as np
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3))) * (255.0 / 16.0)
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))).round().astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(labels))
    train, test = order[:1500], order[1500:]
    os.makedirs(os.path.join(keras_home, "datasets"), exist_ok=True)
    paths = []
    for rank in range(ranks):
        path = os.path.join(keras_home, "datasets", f"mnist-{rank}.npz")
        np.savez(path, x_train=images[train], y_train=labels[train],
                 x_test=images[test], y_test=labels[test])
        paths.append(os.path.realpath(path))
    return paths


def child_env(work, standins):
    env = dict(os.environ)
    for name in list(env):  # never inherit a launcher's identity from the calling shell
        if name.startswith(("OMPI_COMM_WORLD", "HOROVOD_RANK", "HOROVOD_SIZE", "PMI_")):
            del env[name]
    env.update(KERAS_HOME=os.path.join(work, "keras_home"), TF_CPP_MIN_LOG_LEVEL="2",
               TF_NUM_INTRAOP_THREADS="1",  # 2 ranks on 2 cores: one op thread each
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])),
               PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env[STANDINS_VAR] = os.pathsep.join(standins)
    return env


def run_case(work, example, controller, script, flags, env, timeout):
    """One example on NP ranks under horovodrun; returns (exit code, stdout, case dir)."""
    case = os.path.join(work, f"{example}-{controller}")
    os.makedirs(case)
    argv = [HOROVODRUN, "-np", str(NP), "-H", f"localhost:{NP}", f"--{controller}",
            PY, os.path.join(work, "rank_main.py"), case, script, *flags]
    print(f"--- {example} x {controller}: {' '.join(argv)}", flush=True)
    # Its own session: on a timeout the whole job (launcher and ranks) is killed by group.
    # Bytes, not text=True: universal newlines would turn a progress bar's \r into \n and
    # part its updates from the rank tag mpirun writes before each \r.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=case, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = "HUNG"
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    for name, text in (("stdout.log", out), ("stderr.log", err)):
        with open(os.path.join(case, name), "w", newline="") as f:
            f.write(text)
    return code, out + err, case


def checkpoint_digest(path):
    """The weights digest of a saved .h5 model, in a fresh process (compile=False: the
    weights alone, whatever optimizer the model was saved with)."""
    code = ("import hashlib, sys, keras\n"
            "m = keras.models.load_model(sys.argv[1], compile=False)\n"
            "h = hashlib.sha256()\n"
            "for v in m.weights: h.update(v.numpy().tobytes())\n"
            "print(h.hexdigest())")
    proc = subprocess.run([PY, "-c", code, path], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    return proc.stdout.split()[-1] if proc.returncode == 0 and proc.stdout.split() else \
        f"unreadable: {proc.stderr.strip().splitlines()[-1:]}"


def trained_models(case, rank):
    """The digests of rank's models that took optimizer steps (the example's model)."""
    path = os.path.join(case, f"weights-rank{rank}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [m for m in json.load(f)["models"] if m["steps"] > 0]


TAG = re.compile(r"^\[(?:\d+,)?(\d+)\]<std(?:out|err)>:")  # horovodrun's line prefix
INLINE_TAG = re.compile(r"\[(?:\d+,)?\d+\]<std(?:out|err)>:")


def lines_by_rank(output):
    """{rank: [lines]} from horovodrun's tagged output (untagged lines are dropped)."""
    ranks = {}
    for line in output.split("\n"):  # not splitlines(): a progress bar's \r stays in its line
        m = TAG.match(line)
        if m:
            # mpirun --tag-output tags every write, so one line may carry more tags.
            ranks.setdefault(int(m.group(1)), []).append(INLINE_TAG.sub("", line[m.end():]))
    return ranks


def evaluate(example, code, output, case, args):
    """The row of one case: what happened, and the list of failed checks."""
    by_rank = lines_by_rank(output)
    ckpts = {r: sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(case, f"rank{r}", "checkpoint-*.h5"))) for r in range(NP)}
    models = {r: trained_models(case, r) for r in range(NP)}
    row = {"exit": code, "ckpt": ckpts, "failed": []}
    fail = row["failed"].append
    if code != 0:
        fail(f"exit {code}")
    if any(not m or len(m) != 1 for m in models.values()):
        fail(f"not one trained model per rank: {models}")
        row["same"] = row["same_trainable"] = None
    else:
        row["same"] = len({m[0]["weights"] for m in models.values()}) == 1
        row["same_trainable"] = len({m[0]["trainable"] for m in models.values()}) == 1
        row["digests"] = [models[r][0]["weights"][:12] for r in range(NP)]
    if example == "mnist":
        _check_mnist(row, by_rank, case, models, args)
    else:
        _check_synthetic(row, by_rank, models)
    return row


def _check_mnist(row, by_rank, case, models, args):
    fail = row["failed"].append
    accs = re.findall(r"\baccuracy: ([0-9.]+)", "\n".join(by_rank.get(0, [])))
    row["accuracy"] = float(accs[-1]) if accs else None
    if row["accuracy"] is None or row["accuracy"] < args.min_accuracy:
        fail(f"accuracy {row['accuracy']} < {args.min_accuracy}")
    if not row["same"]:
        fail("ranks' weights differ")
    epochs = 24 if args.full else args.mnist_epochs
    if len(row["ckpt"][0]) != epochs or any(row["ckpt"][r] for r in range(1, NP)):
        fail(f"checkpoints {row['ckpt']}: expected {epochs} in rank0/ only")
    row["ckpt_is_final"] = None
    if row["ckpt"][0] and models[0]:
        last = max(row["ckpt"][0], key=lambda n: int(re.sub(r"\D", "", n)))
        row["ckpt_is_final"] = checkpoint_digest(os.path.join(case, "rank0", last)) == \
            models[0][0]["weights"]
        if not row["ckpt_is_final"]:
            fail(f"{last} does not hold rank 0's final weights")


def _check_synthetic(row, by_rank, models):
    """Trainable weights must agree; BatchNorm's moving statistics follow each rank's own
    random batch (Horovod does not average them either), so all weights may differ."""
    fail = row["failed"].append
    row["accuracy"] = row["ckpt_is_final"] = None
    if not row["same_trainable"]:
        fail("ranks' trainable weights differ")
    row["differing"] = differing = _differing_variables(models)
    if any("moving_" not in name for name in differing):
        fail(f"non-BatchNorm-statistics variables differ: {differing}")
    printers = sorted(r for r, lines in by_rank.items() if any("img/sec" in ln for ln in lines))
    total = [ln for ln in by_rank.get(0, []) if ln.startswith("Total img/sec")]
    row["img_sec"] = total[-1].split(":", 1)[1].strip() if total else None
    row["img_sec_ranks"] = printers
    if printers != [0] or not total:
        fail(f"img/sec printed by ranks {printers} (expected [0], with a Total line)")
    if any(row["ckpt"].values()):
        fail(f"checkpoint files {row['ckpt']} from a script that writes none")


def _differing_variables(models):
    """The paths of the variables whose digests differ between the ranks."""
    if any(not m or len(m) != 1 for m in models.values()):
        return []
    per_rank = [dict(map(tuple, models[r][0]["each"])) for r in range(NP)]
    return sorted(name for name in per_rank[0]
                  if len({d.get(name) for d in per_rank}) != 1)


def _yes(value):
    return "-" if value is None else ("yes" if value else "NO")


def _same(row):
    if row["same"] is False and row.get("differing"):
        return f"NO: {len(row['differing'])} BatchNorm moving stats differ"
    return _yes(row["same"])


def table(rows):
    head = ("| example | controller | exit | accuracy | checkpoints rank0 / rank1 | "
            "last ckpt = final | weights equal (all / trainable) | img/sec (rank 0) | "
            "changed lines | result |")
    out = [head, "|" + "---|" * 10]
    for (example, controller, changed), row in rows:
        ck = " / ".join(f"{len(row['ckpt'][r])}" for r in range(NP))
        acc = "-" if row.get("accuracy") is None else f"{row['accuracy']:.4f}"
        out.append(f"| {example} | {controller} | {row['exit']} | {acc} | {ck} | "
                   f"{_yes(row.get('ckpt_is_final'))} | {_same(row)} / "
                   f"{_yes(row['same_trainable'])} | {row.get('img_sec') or '-'} | {changed} | "
                   f"{'pass' if not row['failed'] else 'FAIL: ' + '; '.join(row['failed'])} |")
    return "\n".join(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--horovod_repo", required=True, help="Horovod's git directory (bare is fine)")
    p.add_argument("--rev", default="HEAD", help="the revision to take the examples from")
    p.add_argument("--against", default="horovod_train.keras",
                   help="the module imported as hvd (horovod.tensorflow.keras: Horovod's own)")
    p.add_argument("--examples", default="mnist,synthetic")
    p.add_argument("--controllers", default="gloo,mpi")
    p.add_argument("--full", action="store_true", help="mnist's own 24 x 500 // size steps")
    p.add_argument("--mnist_epochs", type=int, default=4)
    p.add_argument("--mnist_steps", type=int, default=100, help="replaces its 500 (// size)")
    p.add_argument("--min_accuracy", type=float, default=0.9)
    p.add_argument("--bench_flags", default="--model=MobileNetV3Small --batch-size=8 "
                   "--num-batches-per-iter=3 --num-iters=3",
                   help="the benchmark's own flags (MobileNetV3Small: keras.applications' "
                   "smallest at its 224x224 input)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per case")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, rank dirs)")
    args = p.parse_args(argv)
    unknown = set(args.examples.split(",")) - set(EXAMPLES)
    bad = set(args.controllers.split(",")) - {"gloo", "mpi"}
    if not os.path.exists(HOROVODRUN):
        p.error(f"no horovodrun beside {PY} (run from the venv Horovod is built in)")
    if unknown or bad or not os.path.isdir(args.horovod_repo):
        p.error(f"unknown examples {sorted(unknown)} / controllers {sorted(bad)}, "
                f"or no directory {args.horovod_repo}")
    return args


def prepare(work, args):
    """Writes the mended scripts and the rank entry point; prints each diff."""
    with open(os.path.join(work, "rank_main.py"), "w") as f:
        f.write(RANK_MAIN)
    scripts = {}
    for example in args.examples.split(","):
        path = EXAMPLES[example]
        original = extract(args.horovod_repo, args.rev, path)
        mends = mends_for(example, args)
        mended = apply_mends(original, mends)
        changed, diff = diff_of(os.path.basename(path), original, mended)
        target = os.path.join(work, os.path.basename(path))
        with open(target, "w") as f:
            f.write(mended)
        print(f"=== {example}: {len(mends)} mends, {changed} changed lines")
        print("\n".join(f"  - {why}" for why, _, _ in mends))
        print(diff + "\n")
        scripts[example] = (target, changed)
    return scripts


def main(argv=None):
    args = parse_args(argv)
    work = tempfile.mkdtemp(prefix="horovod_examples_")
    try:
        scripts = prepare(work, args)
        standins = write_digits_standins(os.path.join(work, "keras_home"), NP) \
            if "mnist" in scripts else []
        env = child_env(work, standins)
        rows = []
        for example, (script, changed) in scripts.items():
            flags = args.bench_flags.split() if example == "synthetic" else []
            for controller in args.controllers.split(","):
                code, output, case = run_case(work, example, controller, script, flags,
                                              env, args.timeout)
                row = evaluate(example, code, output, case, args)
                if row["failed"]:
                    print(f"{example} x {controller} failed; the end of its output:\n"
                          + output[-4000:])
                rows.append(((example, controller, changed), row))
        print(table(rows))
        return 1 if any(row["failed"] for _, row in rows) else 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
