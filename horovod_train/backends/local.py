"""One process, no communication: debugging, tests, and the single-GPU user."""
from horovod_train import devices
from horovod_train.backends.base import Backend, ProcessInfo
from horovod_train.errors import check_choice
from launch import contract


class LocalBackend(Backend):
    name = "local"

    def __init__(self, compression: str = "none"):
        # Compression is accepted (and validated) so that one script runs unchanged on one
        # process and on many; with one process nothing travels, so it changes nothing.
        super().__init__()
        check_choice("compression", compression, contract.COMPRESSIONS)
        self.compression = compression

    @classmethod
    def options_from_config(cls, config, timeline_path=None) -> dict:
        return {"compression": config.speed.compression}

    def setup(self) -> ProcessInfo:
        self.gpu = devices.pin_gpu(0, 1)  # one process: one GPU, even on a host of several
        self.info = ProcessInfo()
        return self.info
