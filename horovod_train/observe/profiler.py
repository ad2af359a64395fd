"""--profile_steps=a,b: a TensorFlow profiler trace of steps a..b, chief only.

The trace lands in RUN_DIR/profile (TensorBoard's profile plugin, or xprof, opens it).
Profiling costs a lot while on, so the window is the user's to choose, after warm-up.
"""
from absl import logging


class ProfileWindow:
    def __init__(self, window, logdir: str):
        self.first, self.last = window
        self.logdir = logdir
        self._on = False

    def before_step(self, step: int):
        if step == self.first:
            import tensorflow as tf
            tf.profiler.experimental.start(self.logdir)
            self._on = True

    def after_step(self, step: int):
        if self._on and step >= self.last:
            self.stop()
            logging.info("profile | steps %d-%d traced into %s", self.first, self.last,
                         self.logdir)

    def stop(self):
        if self._on:
            import tensorflow as tf
            tf.profiler.experimental.stop()
            self._on = False
