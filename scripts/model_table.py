"""Prints a markdown table of every registered model's parameter count at default sizes.

    python scripts/model_table.py [name ...]

"Parameters" counts trainable weights, the figure papers and torchvision report;
"BN statistics" counts BatchNorm moving means/variances (non-trainable state). Builds
each model on the CPU (the largest take a few seconds each); runs nothing.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models  # noqa: E402  (after the path setup above)


def _count(variables):
    total = 0
    for variable in variables:
        size = 1
        for dim in variable.shape:
            size *= int(dim)
        total += size
    return total


def _shape(tensor):
    return "(" + ", ".join("N" if d is None else str(d) for d in tensor.shape) + ")"


def table_rows(names):
    for name in names:
        start = time.perf_counter()
        model = models.get_model(name)
        trainable = _count(model.trainable_weights)
        state = _count(model.non_trainable_weights)
        yield (name, f"{trainable:,}", f"{state:,}" if state else "-", _shape(model.inputs[0]),
               _shape(model.outputs[0]), f"{time.perf_counter() - start:.1f}")
        del model


def main(argv):
    names = argv[1:] or models.available_models()
    unknown = [n for n in names if n not in models.available_models()]
    if unknown:
        print(f"unknown model(s) {unknown}; available: {', '.join(models.available_models())}",
              file=sys.stderr)
        return 2
    header = ("Model", "Parameters", "BN statistics", "Input", "Output logits")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * 2 + ["---"] * 2) + "|")
    for row in table_rows(names):
        print("| " + " | ".join(row[:-1]) + " |", flush=True)
        print(f"built {row[0]} in {row[-1]} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
