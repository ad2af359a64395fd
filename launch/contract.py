"""What the login side and the worker side must agree on, written once. Stdlib only.

`launch/` (which never imports TensorFlow or Horovod) and `horovod_train/` both import
these names, so a backend name, an environment variable the launcher sets for the
ranks, or a default port cannot drift apart between the two.
"""

# ---- the name lists (flags, the backend registry, the planner and the launcher) ----
BACKENDS = ("horovod", "mwms", "local")  # the registry's names; "auto" picks one
BACKEND_CHOICES = ("auto",) + BACKENDS
LAUNCHED_BACKENDS = ("horovod", "mwms")  # what `python -m launch` starts several ranks of
OPTIMIZERS = ("adam", "sgd")
COLLECTIVES = ("auto", "ring", "nccl")  # mwms: CommunicationImplementation
PRECISIONS = ("fp32", "mixed_float16", "mixed_bfloat16")  # Keras dtype policies
COMPRESSIONS = ("none", "fp16", "bf16")  # gradients on the wire
PROGRESS_MODES = ("auto", "bar", "lines")
JIT_MODES = ("auto", "true", "false")

# ---- the environment the launcher sets for the ranks ----
ENV_HOSTS = "HOROVOD_TRAIN_HOSTS"  # "h1:2,h2:2": hosts and slots, ranks fill them in order
ENV_MWMS_PORT_BASE = "HOROVOD_TRAIN_MWMS_PORT_BASE"  # mwms worker i listens on base + local rank
ENV_TF_WORKERS = "HOROVOD_TRAIN_TF_WORKERS"  # sbatch: the quoted worker list for TF_CONFIG
DEFAULT_MWMS_PORT_BASE = 12345
