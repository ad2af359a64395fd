"""One process, no communication: debugging, tests, and the single-GPU user."""
from horovod_train import devices
from horovod_train.backends.base import Backend, ProcessInfo


class LocalBackend(Backend):
    name = "local"

    def __init__(self, **_options):
        super().__init__()
        self.wire_bytes_per_step = 0  # nothing leaves the process

    def setup(self) -> ProcessInfo:
        self.gpu = devices.pin_gpu(0, 1)  # one process: one GPU, even on a host of several
        self.info = ProcessInfo()
        return self.info
