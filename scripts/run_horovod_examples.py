"""Runs Horovod's four TF2 examples, barely mended, on 2 ranks, and checks the result.

    python scripts/run_horovod_examples.py --horovod_repo DIR              # ours
    python scripts/run_horovod_examples.py --horovod_repo DIR --against horovod.tensorflow
    python scripts/run_horovod_examples.py --horovod_repo DIR --full       # their own lengths
    python scripts/run_horovod_examples.py --horovod_repo DIR --rev v0.28.1 --check_mends

DIR is a (bare) git directory of Horovod. The two Keras examples
(examples/tensorflow2/tensorflow2_keras_mnist.py, tensorflow2_keras_synthetic_benchmark.py:
`mnist`, `synthetic`) and the two GradientTape ones (tensorflow2_mnist.py,
tensorflow2_synthetic_benchmark.py: `tape_mnist`, `tape_synthetic`) are extracted into a
temporary directory and mended there by the named rewrites of mends_for(), each of which
must match exactly once:

  * the Horovod import becomes ours: `import horovod_train.keras as hvd` in the Keras ones,
    `import horovod_train.tensorflow as hvd` in the tape ones. --against names Horovod's
    (or our) module of either API, and the other API's module of the same family is used
    for the other two examples (horovod.tensorflow <-> horovod.tensorflow.keras);
  * compile(experimental_run_tf_function=False) goes: Keras 3's compile() raises
    TypeError on it (the only Keras 3 refusal the two Keras scripts hit);
  * tape ones: opt.variables() becomes opt.variables, a list property in Keras 3;
  * mnist only, unless --full: its fit line's 24 epochs x 500 // size steps become
    --mnist_epochs x --mnist_steps // size (the script exposes no flag; 24 x 250 steps of
    its conv net at 0.43 s a step on 2 ranks sharing 2 cores take ~45 min per run);
  * tape_mnist only, unless --full: its 10000 // size steps become --tape_mnist_steps //
    size (no flag either; 5000 steps of 128 images would take ~35 min per run).

The benchmarks are shrunk by their own flags (--bench_flags). Nothing else of the scripts
changes; the diff of every mend is printed with its changed-line count.

Controllers: horovodrun --gloo and --mpi, and mwms: NP processes started here, each with a
TF_CONFIG of NP workers on free localhost ports (launch.ports.free_port_base), which is how
our modules run on tf.distribute's collectives. Horovod's own modules have no such mode, so
their mwms cases are skipped; so are the Keras examples' (our Keras API has no MWMS path).

Data: the mnist example calls mnist.load_data(path='mnist-%d.npz' % hvd.rank()), which
looks in $KERAS_HOME/datasets/ before downloading. We write mnist-<rank>.npz there, built
from scikit-learn's digits, under a temporary KERAS_HOME. Keras also checks the file's
sha256 against the real MNIST's and would re-download a stand-in (no network: the run
fails), so the rank entry point waives that check for the files we wrote, by path, and
for nothing else: the script's data code stays untouched.

Each rank runs through a rank entry point of ours (RANK_MAIN, written to the temp dir):
it chdirs into <case>/rank<N>/ (N: the Horovod/MPI rank, or the TF_CONFIG task index; a
file a non-chief rank writes shows up in rank1/), and, as an observer only, at exit digests
the weights of every Keras model still alive into <case>/weights-rank<N>.json. Then the
table: exit code, accuracy (tape_mnist: its last printed loss), checkpoint files per rank,
whether the chief's last checkpoint holds its final weights, and the ranks' digests.

Exit code: 0 when every case passed its checks, 1 otherwise, 2 on bad input.
"""
import argparse
import collections
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
sys.path.insert(0, ROOT)  # run as a script from a checkout: launch/ (standard library only)
from launch.ports import free_port_base  # noqa: E402
from launch.tfconfig import tf_config, to_json  # noqa: E402

PY = sys.executable
HOROVODRUN = os.path.join(os.path.dirname(PY), "horovodrun")
NP = 2
# api: which Horovod API the example imports; kind: which checks its output gets
Example = collections.namedtuple("Example", "path api kind")
EXAMPLES = {
    "mnist": Example("examples/tensorflow2/tensorflow2_keras_mnist.py", "keras", "mnist"),
    "synthetic": Example("examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py",
                         "keras", "synthetic"),
    "tape_mnist": Example("examples/tensorflow2/tensorflow2_mnist.py", "tape", "mnist"),
    "tape_synthetic": Example("examples/tensorflow2/tensorflow2_synthetic_benchmark.py",
                              "tape", "synthetic"),
}
HOROVOD_IMPORTS = {"keras": "import horovod.tensorflow.keras as hvd",
                   "tape": "import horovod.tensorflow as hvd"}
# The module of each API in one family: --against names either, the other follows.
FAMILIES = ({"keras": "horovod_train.keras", "tape": "horovod_train.tensorflow"},
            {"keras": "horovod.tensorflow.keras", "tape": "horovod.tensorflow"})
CONTROLLERS = ("gloo", "mpi", "mwms")
STANDINS_VAR = "RUN_HOROVOD_EXAMPLES_STANDINS"  # os.pathsep-separated absolute paths

# The rank entry point: argv = CASE_DIR SCRIPT ARGS... Our code, not Horovod's.
RANK_MAIN = r'''
import atexit, gc, hashlib, json, os, runpy, sys

RANK = os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", str(
    json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0))))
CASE = os.path.abspath(sys.argv[1])
STANDINS = {os.path.realpath(p) for p in os.environ.get("%(var)s", "").split(os.pathsep) if p}
_kept = []  # models and optimizers seen at a full collection: alive until the exit hook


def _alive(kind="Model"):
    base = getattr(sys.modules.get("keras"), kind, None)  # None while keras imports
    if kind == "Optimizer":
        base = getattr(getattr(sys.modules.get("keras"), "optimizers", None), kind, None)
    if not isinstance(base, type):
        return []
    return [o for o in gc.get_objects() + _kept if issubclass(type(o), base)]


def _keep_models(phase, info):
    # A model local to the example's main() may only be held by reference cycles once
    # main() returns; a full collection before exit would free it unseen.
    if phase == "start" and info["generation"] == 2:
        _kept[:] = list({id(o): o for o in _alive() + _alive("Optimizer")}.values())


def _digest(variables):
    h = hashlib.sha256()
    for v in variables:
        h.update(v.numpy().tobytes())
    return h.hexdigest()


def _write_digests():
    models = []
    alive = list({id(m): m for m in _alive()}.values())
    inner = {id(getattr(m, "_functional", None)) for m in alive}  # a Sequential's own graph
    for m in alive:
        opt = getattr(m, "optimizer", None)
        steps = int(opt.iterations.numpy()) if opt is not None and m.built else 0
        models.append({"name": m.name, "class": type(m).__name__, "built": m.built,
                       "steps": steps, "inner": id(m) in inner, "compiled": opt is not None,
                       "weights": _digest(m.weights),
                       "trainable": _digest(m.trainable_weights),
                       "each": [[getattr(v, "path", v.name), _digest([v])[:16]]
                                for v in m.weights]})
    optimizers = [int(o.iterations.numpy()) for o in {id(o): o for o in _alive("Optimizer")}.values()]
    with open(os.path.join(CASE, "weights-rank%%s.json" %% RANK), "w") as f:
        json.dump({"rank": int(RANK), "models": models, "optimizer_steps": optimizers}, f,
                  indent=1)


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


def module_for(api, against):
    """The module imported as hvd by an example of `api`: --against's family member, or
    --against itself when it is no known family's."""
    family = next((f for f in FAMILIES if against in f.values()), {api: against})
    return family[api]


def is_horovods(module):
    return module.split(".")[0] == "horovod"


def mends_for(example, args):
    """[(why, old, new)]: the rewrites of one example, each to match exactly once."""
    api = EXAMPLES[example].api
    module, mends = module_for(api, args.against), []
    if module != HOROVOD_IMPORTS[api].split()[1]:
        mends.append((f"the import: our {'Keras 3' if api == 'keras' else 'TF2'} API under "
                      "Horovod's name", HOROVOD_IMPORTS[api], f"import {module} as hvd"))
    if api == "keras":
        mends.append(("Keras 3 compile() raises TypeError on this Keras 2 argument",
                      "experimental_run_tf_function=False)", ")"))
    else:
        mends.append(("Keras 3 optimizers' variables is a list property, not a method",
                      "hvd.broadcast_variables(opt.variables(), root_rank=0)",
                      "hvd.broadcast_variables(opt.variables, root_rank=0)"))
    if example == "mnist" and not args.full:
        mends.append(("run length: 24 epochs x 500 // size steps take ~45 min on 2 cores",
                      "steps_per_epoch=500 // hvd.size(), callbacks=callbacks, epochs=24,",
                      f"steps_per_epoch={args.mnist_steps} // hvd.size(), callbacks=callbacks, "
                      f"epochs={args.mnist_epochs},"))
    if example == "tape_mnist" and not args.full:
        mends.append(("run length: 10000 // size steps of 128 images take ~35 min on 2 cores",
                      "dataset.take(10000 // hvd.size())",
                      f"dataset.take({args.tape_mnist_steps} // hvd.size())"))
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


def check_mended(example, against, mends, original, mended):
    """Exits 2 unless the mended script is what the mends promise: the import of
    `against`'s member for the example's API, neither Keras 2 call left, and one changed
    line per mend (none for an import that was Horovod's already). The tool's own check,
    run on every extraction: Horovod's text is read from a git dir no CI machine has."""
    module = module_for(EXAMPLES[example].api, against)
    changed, _ = diff_of(example, original, mended)
    problems = [what for what, bad in (
        (f"no 'import {module} as hvd' line", f"import {module} as hvd\n" not in mended),
        ("opt.variables() left", "opt.variables()" in mended),
        ("experimental_run_tf_function=False) left", "experimental_run_tf_function=False)" in mended),
        (f"{changed} changed lines for {len(mends)} mends", int(changed.split()[0]) != len(mends)),
    ) if bad]
    if problems:
        bad_input(f"{example} mended against {against}: {'; '.join(problems)}")


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


def launch_commands(controller, rank_main, case, script, flags, port_base=None):
    """[(argv, extra env)]: one horovodrun job, or for mwms one process a worker, each with
    the TF_CONFIG of NP workers on localhost ports port_base.. (worker index = rank)."""
    rank_argv = [PY, rank_main, case, script, *flags]
    if controller != "mwms":
        return [([HOROVODRUN, "-np", str(NP), "-H", f"localhost:{NP}", f"--{controller}",
                  *rank_argv], {})]
    workers = [f"localhost:{port_base + i}" for i in range(NP)]
    return [(rank_argv, {"TF_CONFIG": to_json(tf_config(workers, i))}) for i in range(NP)]


def _wait_all(procs, timeout):
    """The first non-zero exit code (else 0), or "HUNG": then every group is killed."""
    try:
        codes = [proc.wait(timeout=timeout) for proc in procs]  # one deadline is enough
    except subprocess.TimeoutExpired:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return "HUNG"
    return next((code for code in codes if code != 0), 0)


def run_case(work, example, controller, script, flags, env, timeout):
    """One example on NP ranks; returns (exit code, output as horovodrun tags it, case dir)."""
    case = os.path.join(work, f"{example}-{controller}")
    os.makedirs(case)
    port_base = free_port_base(NP) if controller == "mwms" else None
    commands = launch_commands(controller, os.path.join(work, "rank_main.py"), case, script,
                               flags, port_base)
    procs = []
    for i, (argv, extra) in enumerate(commands):
        print(f"--- {example} x {controller}: {' '.join(f'{k}={v}' for k, v in extra.items())}"
              f"{' ' if extra else ''}{' '.join(argv)}", flush=True)
        # Its own session: on a timeout the whole job (launcher and ranks) is killed by
        # group. Files, not pipes: NP processes' pipes would need NP readers. Bytes, not
        # text: universal newlines would turn a progress bar's \r into \n and part its
        # updates from the rank tag mpirun writes before each \r.
        with open(os.path.join(case, f"stdout{i}.log"), "wb") as out, \
                open(os.path.join(case, f"stderr{i}.log"), "wb") as err:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=err, env={**env, **extra},
                                          cwd=case, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
    code = _wait_all(procs, timeout)
    texts = []
    for i in range(len(commands)):
        for stream in ("stdout", "stderr"):
            with open(os.path.join(case, f"{stream}{i}.log"), "rb") as f:
                text = f.read().decode(errors="replace")
            # A worker started here is untagged: tag it as horovodrun tags its ranks.
            texts.append(text if controller != "mwms" else "".join(
                f"[{i}]<{stream}>:{line}\n" for line in text.split("\n") if line))
    return code, "".join(texts), case


# A fresh process reads a checkpoint and prints its weights' digest. .h5 (the Keras
# examples' ModelCheckpoint): the model's weights in order (compile=False: whatever
# optimizer it was saved with). A tf.train.Checkpoint prefix (tape_mnist): the sorted
# 16-digit digests of every variable in it, joined. Keras 3 models are saved there without
# a model/ path of their own: their weights come in only as the optimizer's
# _trainable_variables, so the check is that rank 0's final weights are among them.
_CKPT_DIGEST = """import hashlib, sys
path = sys.argv[1]
def digest(arrays):
    h = hashlib.sha256()
    for a in arrays: h.update(a.tobytes())
    return h.hexdigest()
if path.endswith('.h5'):
    import keras
    print(digest(v.numpy() for v in keras.models.load_model(path, compile=False).weights))
else:
    import tensorflow as tf
    reader = tf.train.load_checkpoint(path)
    keys = [k for k in reader.get_variable_to_shape_map()
            if k.endswith('/.ATTRIBUTES/VARIABLE_VALUE')]
    print(','.join(sorted(digest([reader.get_tensor(k)])[:16] for k in keys)))
"""


def checkpoint_digest(path):
    """The weights digest of a saved checkpoint (see _CKPT_DIGEST), or 'unreadable: ...'."""
    proc = subprocess.run([PY, "-c", _CKPT_DIGEST, path], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    return proc.stdout.split()[-1] if proc.returncode == 0 and proc.stdout.split() else \
        f"unreadable: {proc.stderr.strip().splitlines()[-1:]}"


def holds_final(saved, model, api):
    """Whether checkpoint_digest's `saved` holds the model's final weights: the same digest
    (.h5), or every weight's digest among the checkpoint's variables' (tape)."""
    if api == "keras":
        return saved == model["weights"]
    missing = collections.Counter(d for _, d in model["each"])
    missing.subtract(collections.Counter(saved.split(",")))
    return not +missing


def trained_models(case, rank, api="keras"):
    """The digests of rank's models that took optimizer steps (the example's model). A tape
    example compiles nothing: its model is the built one that is no other's inner graph,
    once some optimizer stepped."""
    path = os.path.join(case, f"weights-rank{rank}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        found = json.load(f)
    if api == "keras":
        return [m for m in found["models"] if m["steps"] > 0]
    steps = max(found.get("optimizer_steps") or [0])
    return [dict(m, steps=steps) for m in found["models"]
            if m["built"] and not m["inner"] and not m["compiled"] and steps > 0]


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
    api, kind = EXAMPLES[example].api, EXAMPLES[example].kind
    by_rank = lines_by_rank(output)
    # tape_mnist's tf.train.Checkpoint('./checkpoints') writes checkpoints-N.index/.data-*
    # and an index file named checkpoint: one save is its .index file.
    pattern = "checkpoint-*.h5" if api == "keras" else "checkpoint*"
    ckpts = {r: sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(case, f"rank{r}", pattern))) for r in range(NP)}
    models = {r: trained_models(case, r, api) for r in range(NP)}
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
    elif example == "tape_mnist":
        _check_tape_mnist(row, by_rank, case, models, args)
    else:
        _check_synthetic(row, by_rank, models)
    return row


def _check_tape_mnist(row, by_rank, case, models, args):
    """Its 'Step #N\tLoss: x' lines come from rank 0 alone, every 10th step, and the loss
    falls; its tf.train.Checkpoint save is in rank0/ alone and holds the final weights."""
    fail = row["failed"].append
    steps = 10000 if args.full else args.tape_mnist_steps
    losses = [float(x) for x in re.findall(r"^Step #\d+\tLoss: ([0-9.]+)$",
                                            "\n".join(by_rank.get(0, [])), re.M)]
    printers = sorted(r for r, lines in by_rank.items()
                      if any(ln.startswith("Step #") for ln in lines))
    row["loss"] = f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else None
    row["accuracy"] = None
    expected = len(range(0, steps // NP, 10))
    if printers != [0] or len(losses) != expected:
        fail(f"{len(losses)} loss lines from ranks {printers} (expected {expected} from [0])")
    elif not losses[-1] < args.max_loss_ratio * losses[0]:
        fail(f"loss {row['loss']} did not fall below {args.max_loss_ratio} x its first")
    if not row["same"]:
        fail("ranks' weights differ")
    saves = [n for n in row["ckpt"][0] if n.endswith(".index")]
    if len(saves) != 1 or any(row["ckpt"][r] for r in range(1, NP)):
        fail(f"checkpoints {row['ckpt']}: expected one save in rank0/ only")
    row["ckpt_is_final"] = None
    if saves and models[0]:
        prefix = os.path.join(case, "rank0", saves[0][:-len(".index")])
        row["ckpt_is_final"] = holds_final(checkpoint_digest(prefix), models[0][0], "tape")
        if not row["ckpt_is_final"]:
            fail(f"{saves[0]} does not hold rank 0's final weights")


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
        row["ckpt_is_final"] = holds_final(
            checkpoint_digest(os.path.join(case, "rank0", last)), models[0][0], "keras")
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
    head = ("| example | controller | exit | accuracy (loss) | checkpoints rank0 / rank1 | "
            "last ckpt = final | weights equal (all / trainable) | img/sec (rank 0) | "
            "changed lines | result |")
    out = [head, "|" + "---|" * 10]
    for (example, controller, changed), row in rows:
        ck = " / ".join(f"{len(row['ckpt'][r])}" for r in range(NP))
        acc = row.get("loss") or ("-" if row.get("accuracy") is None
                                  else f"{row['accuracy']:.4f}")
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
                   help="the module imported as hvd (horovod.tensorflow.keras or "
                   "horovod.tensorflow: Horovod's own); the tape examples get its family's "
                   "TF API module (horovod_train.tensorflow, horovod.tensorflow)")
    p.add_argument("--examples", default=",".join(EXAMPLES))
    p.add_argument("--controllers", default=",".join(CONTROLLERS),
                   help="mwms: NP TF_CONFIG workers started here (our tape API only)")
    p.add_argument("--full", action="store_true",
                   help="mnist's own 24 x 500 // size steps, tape_mnist's 10000 // size")
    p.add_argument("--mnist_epochs", type=int, default=4)
    p.add_argument("--mnist_steps", type=int, default=100, help="replaces its 500 (// size)")
    p.add_argument("--min_accuracy", type=float, default=0.9)
    p.add_argument("--tape_mnist_steps", type=int, default=200,
                   help="replaces tape_mnist's 10000 (// size)")
    p.add_argument("--max_loss_ratio", type=float, default=0.5,
                   help="tape_mnist's last printed loss must be below this x its first")
    p.add_argument("--bench_flags", default="--model=MobileNetV3Small --batch-size=8 "
                   "--num-batches-per-iter=3 --num-iters=3",
                   help="the benchmark's own flags (MobileNetV3Small: keras.applications' "
                   "smallest at its 224x224 input)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per case")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, rank dirs)")
    p.add_argument("--check_mends", action="store_true",
                   help="only check that every mend matches once and does what it says, "
                   "for both --against families and with and without --full; start no ranks")
    args = p.parse_args(argv)
    unknown = set(args.examples.split(",")) - set(EXAMPLES)
    bad = set(args.controllers.split(",")) - set(CONTROLLERS)
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
        path = EXAMPLES[example].path
        original = extract(args.horovod_repo, args.rev, path)
        mends = mends_for(example, args)
        mended = apply_mends(original, mends)
        check_mended(example, args.against, mends, original, mended)
        changed, diff = diff_of(os.path.basename(path), original, mended)
        target = os.path.join(work, os.path.basename(path))
        with open(target, "w") as f:
            f.write(mended)
        print(f"=== {example}: {len(mends)} mends, {changed} changed lines")
        print("\n".join(f"  - {why}" for why, _, _ in mends))
        print(diff + "\n")
        scripts[example] = (target, changed)
    return scripts


def cases(args):
    """[(example, controller)] to run, and [(example, controller, why not)] skipped."""
    run, skipped = [], []
    for example in args.examples.split(","):
        api = EXAMPLES[example].api
        for controller in args.controllers.split(","):
            if controller == "mwms" and is_horovods(module_for(api, args.against)):
                skipped.append((example, controller, "Horovod's API has no TF_CONFIG mode"))
            elif controller == "mwms" and api == "keras":
                skipped.append((example, controller, "our Keras API runs under horovodrun"))
            else:
                run.append((example, controller))
    return run, skipped


def check_all_mends(args):
    """--check_mends: every example, mended for each family and run length, checked."""
    for against in ("horovod_train.keras", "horovod.tensorflow"):
        for full in (False, True):
            for example in args.examples.split(","):
                variant = argparse.Namespace(**{**vars(args), "against": against, "full": full})
                original = extract(args.horovod_repo, args.rev, EXAMPLES[example].path)
                mends = mends_for(example, variant)
                check_mended(example, against, mends, original, apply_mends(original, mends))
                print(f"mends ok | {example} against {against}{' --full' if full else ''}: "
                      f"{len(mends)} mends")
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.check_mends:
        return check_all_mends(args)
    work = tempfile.mkdtemp(prefix="horovod_examples_")
    try:
        scripts = prepare(work, args)
        standins = write_digits_standins(os.path.join(work, "keras_home"), NP) \
            if any(EXAMPLES[e].kind == "mnist" for e in scripts) else []
        env = child_env(work, standins)
        rows = []
        run, skipped = cases(args)
        for example, controller in run:
            script, changed = scripts[example]
            flags = args.bench_flags.split() if EXAMPLES[example].kind == "synthetic" else []
            code, output, case = run_case(work, example, controller, script, flags,
                                          env, args.timeout)
            row = evaluate(example, code, output, case, args)
            if row["failed"]:
                print(f"{example} x {controller} failed; the end of its output:\n"
                      + output[-4000:])
            rows.append(((example, controller, changed), row))
        print(table(rows))
        print("".join(f"skipped {e} x {c}: {why}\n" for e, c, why in skipped), end="")
        return 1 if any(row["failed"] for _, row in rows) else 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
