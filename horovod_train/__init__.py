"""horovod_train: data-parallel TensorFlow 2 / Keras 3 training on Horovod or MWMS.

Importing this package must stay cheap: no TensorFlow, no Horovod. Heavy modules are
imported where they are used (backends, step, loop).
"""

__version__ = "0.1.0"
