"""One process, no communication: debugging, tests, and the single-GPU user."""
from horovod_train.backends.base import Backend, ProcessInfo


class LocalBackend(Backend):
    name = "local"

    def __init__(self, **_options):
        super().__init__()

    def setup(self) -> ProcessInfo:
        self.info = ProcessInfo()
        return self.info
