"""Keras for a rank, without the optional extras it would load and the rank never uses.

`import keras` (3.x) imports scikit-learn (for keras.wrappers' estimators) and
matplotlib.pyplot (for keras.visualization's image galleries) whenever they are
installed, and our venv has both: scikit-learn ships the bundled digits, matplotlib
draws `report`'s PNGs. A rank uses neither through Keras, yet paid about a quarter of
its import time for them, at every launch and relaunch, on every rank (bench/startup.py
measures it). Keras is written to run without them: each of those imports sits in a
`try: ... except ImportError`, and using a wrapper or a gallery then raises Keras' own
"requires scikit-learn / matplotlib" error. So a rank imports Keras as if they were
absent; anything imported afterwards (our digits loader, the report) is untouched.

The import also runs without Python's cyclic garbage collector, whose full passes walk
every object TensorFlow has made so far (a million and more): six of them cost a rank
0.5-1 s of CPU at every start. After it the modules' objects are frozen (gc.freeze): they
live as long as the process, so later collections, during the model's build and the
steps, skip them too (bench/startup.py measures the start).
"""
import gc
import importlib.abc
import sys

# The packages Keras imports only for optional features; a rank's Keras loads without them.
EXTRAS = ("matplotlib", "sklearn")


class _ExtrasAbsent(importlib.abc.MetaPathFinder):
    """Answers "not installed" for EXTRAS while it sits first on sys.meta_path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"{fullname} is not loaded with a rank's Keras",
                                      name=fullname)
        return None


def import_keras() -> None:
    """Imports TensorFlow and Keras without EXTRAS. Once per process, before anything
    else imports either (TensorFlow's own import loads Keras, for tf.keras); a no-op if
    Keras is loaded already (it then has what it found)."""
    if "keras" in sys.modules:
        return
    finder = _ExtrasAbsent()
    sys.meta_path.insert(0, finder)
    collecting = gc.isenabled()
    gc.disable()
    try:
        import tensorflow  # noqa: F401
        import keras  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
        gc.freeze()
        if collecting:
            gc.enable()
