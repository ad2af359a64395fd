"""One evaluation pass, op by op against the shipped rule (horovod_train/evaluation.py).

  python bench/evaluation.py [--short] [--out runs/bench/evaluation.json]

One process, one thread, local backend: evaluation.evaluate over a test shard of
random inputs, as shipped (the first EAGER_BATCHES batches eagerly, the rest through
one traced function, its tracing included) and with every batch run eagerly (the rule
before issue 64). The models are the digits CNN on its test shard at 2 ranks (180
images in batches of 32: never traced) and the case study's decoder LM on its
validation shard at 2 ranks (1,112 sequences of 64 bytes in batches of 4). Alternating
rounds, medians; the ratio is eager / shipped (above 1: the rule is faster).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

# (model, its keyword arguments, input shape, labels per example, classes, examples, batch)
MODELS = [("digits_cnn", {"input_shape": (8, 8, 1), "num_classes": 10}, (8, 8, 1), (), 10,
           180, 32),
          ("decoder_lm_small", {"input_shape": (64,), "num_classes": 256}, (64,), (64,), 256,
           1112, 4)]
ROUNDS = {True: 2, False: 4}


def _dataset(shape, labels, classes, examples, batch):
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)
    if labels:  # token ids in, the next token's id out
        x = rng.integers(0, classes, (examples, *shape)).astype(np.int32)
    else:
        x = rng.random((examples, *shape), dtype=np.float32)
    y = rng.integers(0, classes, (examples, *labels)).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _seconds(model, dataset, eager_batches) -> float:
    from horovod_train import evaluation
    from horovod_train.backends.local import LocalBackend
    start = time.perf_counter()
    evaluation.evaluate(model, dataset, LocalBackend(), eager_batches=eager_batches)
    return time.perf_counter() - start


def _one_model(name, kwargs, shape, labels, classes, examples, batch, rounds) -> dict:
    from horovod_train import evaluation
    from models import get_model
    model = get_model(name, **kwargs)
    dataset = _dataset(shape, labels, classes, examples, batch)
    _seconds(model, dataset, len(dataset) + 1)  # the first pass builds the model's layers
    eager, shipped = [], []
    for _ in range(rounds):
        eager.append(_seconds(model, dataset, len(dataset) + 1))
        shipped.append(_seconds(model, dataset, evaluation.EAGER_BATCHES))
    return {"model": name, "examples": examples, "batch": batch, "batches": len(dataset),
            "eager_s": statistics.median(eager), "shipped_s": statistics.median(shipped),
            "ratio": statistics.median(eager) / statistics.median(shipped),
            "eager_samples_s": eager, "shipped_samples_s": shipped}


def measure(short: bool) -> dict:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from horovod_train import evaluation
    return {"models": [_one_model(*spec, ROUNDS[short]) for spec in MODELS],
            "eager_batches": evaluation.EAGER_BATCHES, "rounds": ROUNDS[short]}


def report(r: dict) -> str:
    rows = [[x["model"], x["examples"], x["batch"], x["batches"], f"{x['eager_s']:.2f}",
             f"{x['shipped_s']:.2f}", f"{x['ratio']:.2f}"] for x in r["models"]]
    return (f"One evaluation pass: every batch eager against the first {r['eager_batches']} "
            f"eager and the rest traced (tracing included); medians of {r['rounds']} "
            f"alternating rounds, one thread\n"
            + common.table(["model", "examples", "batch", "batches", "eager s", "shipped s",
                            "eager / shipped"], rows))


if __name__ == "__main__":
    common.main("evaluation", __doc__, measure, report)
