"""Keras imported for a rank without its optional extras (horovod_train/lean_keras.py)
works, says what is missing when an extra is used, and leaves both packages importable
afterwards. In a child process: this one may have Keras loaded already.
(tests/e2e/test_cli.py checks that a real run loads neither.)"""
import json
import sys

from helpers import run_cli

CHILD = """
import gc, json, sys
from horovod_train import lean_keras
lean_keras.import_keras()
seen = {"extras_after_keras": sorted(m for m in sys.modules
                                     if m.split(".")[0] in lean_keras.EXTRAS),
        "collector": [gc.isenabled(), gc.get_freeze_count(), len(gc.get_objects())]}
import keras, numpy as np
layer = keras.layers.Dense(3, kernel_initializer="ones")
seen["dense"] = np.asarray(layer(np.ones((1, 2), "float32"))).tolist()
try:
    keras.wrappers.SKLearnClassifier(model=None)
    seen["wrapper"] = "no error"
except ImportError as err:
    seen["wrapper"] = str(err)
lean_keras.import_keras()  # again: a no-op
import sklearn.datasets, matplotlib.pyplot
seen["later"] = [sklearn.datasets.__name__, matplotlib.pyplot.__name__]
print(json.dumps(seen))
"""


def test_keras_without_extras_works_and_the_extras_stay_importable():
    proc = run_cli([sys.executable, "-c", CHILD], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["extras_after_keras"] == [], seen
    # The collector is back on, and TF's and Keras' objects are frozen out of its passes:
    # what it still tracks is a small fraction of them.
    enabled, frozen, tracked = seen["collector"]
    assert enabled and frozen > 100_000 and tracked < frozen / 10, seen
    assert seen["dense"] == [[2.0, 2.0, 2.0]], seen
    assert "scikit-learn" in seen["wrapper"], seen
    assert seen["later"] == ["sklearn.datasets", "matplotlib.pyplot"], seen
