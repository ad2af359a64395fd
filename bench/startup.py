"""The time to the first step: horovod_train against plain Keras `model.fit` (issue 41).

  python bench/startup.py [--short] [--out runs/bench/startup.json]

Two cases, each in one process: the bundled digits, and a generated set of JPEG images
in class folders converted to TFRecord with `python -m horovod_train.data convert`.
Both train digits_cnn with Adam at batch 32. Ours is `python -m horovod_train
--max_steps=1` with its defaults (verification on: the set is verified by a first
launch, so the measured ones find the verdicts remembered, as every relaunch does);
the baseline is bench/startup_keras.py. The clock for both is the seconds from the
process's start to the end of the first training step. The arms alternate, and the
figure is the ratio of the medians. Target: ours at most 1.15x Keras's.
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from horovod_train import startup  # noqa: E402  (TF-free)

TARGET = 1.15
MODEL = "digits_cnn"
BATCH = 32
HEADERS = ("case", "ours s (median)", "keras s (median)", "ours / keras", "runs",
           "ours by phase (median run)", "keras by phase (median run)")


def _jpeg_folder(root: str, count: int, size: int = 32, classes: int = 10) -> str:
    """`count` JPEG images in class folders: a class's colour plus noise, so the set
    is learnable and every file differs."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    colours = rng.integers(0, 256, (classes, 3))
    for i in range(count):
        label = i % classes
        folder = os.path.join(root, f"class{label}")
        os.makedirs(folder, exist_ok=True)
        noise = rng.integers(-40, 41, (size, size, 3))
        pixels = np.clip(colours[label] + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)
    return root


def _convert(images: str, out: str) -> str:
    common.run([common.PY, "-m", "horovod_train.data", "convert", f"--input={images}",
                f"--output_dir={out}", "--format=tfrecord", "--num_shards=8"], timeout=900)
    return out


def _ours(flags: list) -> dict:
    summary, _ = common.train([], [f"--model={MODEL}", f"--batch_size={BATCH}",
                                   "--max_steps=1", *flags], timeout=900)
    phases = summary["startup_s_per_rank"][0]
    return {"seconds": phases["total"], "phases": phases}


def _keras(flags: list) -> dict:
    out = common.run([common.PY, os.path.join(common.ROOT, "bench", "startup_keras.py"),
                      f"--model={MODEL}", f"--batch_size={BATCH}", *flags], timeout=900)
    result = common.json_lines(out)[-1]
    return {"seconds": result["first_step_after_s"], "phases": result["phases"]}


def _typical(runs: list) -> dict:
    """The run whose time is the median's: its phases stand for the arm's."""
    median = statistics.median(run["seconds"] for run in runs)
    return min(runs, key=lambda run: abs(run["seconds"] - median))


def _case(name: str, ours_flags: list, keras_flags: list, rounds: int) -> dict:
    ours, keras = [], []
    for _ in range(rounds):  # alternating: a load change on the host hits both arms
        ours.append(_ours(ours_flags))
        keras.append(_keras(keras_flags))
    seconds = {arm: [run["seconds"] for run in runs] for arm, runs in
               (("ours", ours), ("keras", keras))}
    return {"case": name, "ours_s": seconds["ours"], "keras_s": seconds["keras"],
            "ours_phases": _typical(ours)["phases"], "keras_phases": _typical(keras)["phases"],
            "ratio": common.ratio(statistics.median(seconds["ours"]),
                                  statistics.median(seconds["keras"]))}


def measure(short: bool) -> dict:
    rounds, images = (3, 1000) if short else (5, 4000)
    cases = [_case("digits", ["--dataset=digits"], ["--dataset=digits"], rounds)]
    with tempfile.TemporaryDirectory() as tmp:
        data = _convert(_jpeg_folder(os.path.join(tmp, "images"), images),
                        os.path.join(tmp, "tfrecord"))
        flags = ["--dataset=tfrecord", f"--data_dir={data}"]
        _ours(flags)  # the first launch verifies the set and remembers the verdicts
        cases.append(_case(f"{images} JPEG 32x32 (TFRecord)", flags, flags, rounds))
    return {"cases": cases, "target": TARGET, "model": MODEL, "batch_size": BATCH}


def _phases(phases: dict) -> str:
    """Seconds per phase in the order they run (horovod_train.startup.KEYS; Keras's
    run has no join or restore of its own)."""
    return " ".join(f"{k} {phases[k]:.2f}" for k in startup.KEYS if k in phases)


def report(r: dict) -> str:
    rows = [(c["case"], f"{statistics.median(c['ours_s']):.2f}",
             f"{statistics.median(c['keras_s']):.2f}", f"{c['ratio']:.3f}", len(c["ours_s"]),
             _phases(c["ours_phases"]), _phases(c["keras_phases"])) for c in r["cases"]]
    lines = [f"Time to the first step, one process, {r['model']} batch {r['batch_size']}: "
             "horovod_train vs plain Keras model.fit", common.table(HEADERS, rows)]
    for c in r["cases"]:
        verdict = "met" if c["ratio"] <= r["target"] else "MISSED"
        lines.append(f"{c['case']}: ours / keras {c['ratio']:.3f} "
                     f"(target <= {r['target']}: {verdict})")
    return "\n".join(lines)


if __name__ == "__main__":
    common.main("startup", __doc__, measure, report)
