"""The one loop (trainer.Trainer) under its two kinds of state keeper, in one process:
the checkpoint keeper, and a keeper that re-forms a "ring" at another world size
mid-epoch, as an elastic run does, without Horovod."""
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import models  # noqa: E402
from horovod_train import checkpoint, schedules  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import data as data_lib  # noqa: E402
from horovod_train.backends.base import ProcessInfo  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.data import sharding  # noqa: E402
from horovod_train.grid import epoch_grid  # noqa: E402
from horovod_train.trainer import Trainer  # noqa: E402
from horovod_train.trainer_types import CheckpointKeeper, Position  # noqa: E402
from horovod_train.trainer_types import TrainerOptions  # noqa: E402

BATCH = 32


def _trainer(epochs=2, log_every=8, batch_size=BATCH):
    config = cfg.RunConfig(
        model="digits_mlp", data=cfg.DataConfig(batch_size=batch_size),
        train=cfg.TrainConfig(epochs=epochs, log_every=log_every, eval_every_epochs=1,
                              eval_at_start=True),
        runtime=cfg.RuntimeConfig(backend="local"))
    keras.utils.set_random_seed(0)
    backend = LocalBackend()
    backend.setup()
    data = data_lib.load(config.data)
    grid = epoch_grid(data.num_train_examples, batch_size, 1, epochs)
    model = models.get_model(config.model, input_shape=data.input_shape,
                             num_classes=data.num_classes)
    schedule = schedules.lr_schedule(config.optim, 1, grid.per_epoch)
    optimizer = schedules.make_optimizer(config.optim, schedule)
    optimizer.build(model.trainable_variables)
    return Trainer(TrainerOptions.from_config(config, jit_compile=False), backend, data, model,
                   optimizer, grid,
                   learning_rate=schedule)


def _steps(history):
    return [step for step, _ in history]


def test_plain_run_evaluates_at_start_after_each_epoch_and_logs_the_last_step():
    trainer = _trainer(epochs=3)
    keeper = CheckpointKeeper(checkpoint.Checkpointer(cfg.RunConfig(), trainer.backend, [],
                                                      trainer.grid.per_epoch), trainer.grid)
    trainer.train(keeper)
    per_epoch, total = trainer.grid.per_epoch, trainer.total
    assert trainer.global_step == total == 3 * per_epoch and total % 8
    assert _steps(trainer.accuracy_history) == [0, per_epoch, 2 * per_epoch, total]
    assert _steps(trainer.loss_history) == [*range(8, total, 8), total]
    assert trainer.position == Position(total, 3, 0)


def test_evaluation_batches_are_the_training_batch():
    """What fits in a training step fits in evaluation: a 124M-parameter LM's
    evaluation at 256 sequences a batch took its ranks to 3.8 GB, 2.9 GB at 2."""
    trainer = _trainer(epochs=1, batch_size=8)
    asked = []

    class Recording:
        def __getattr__(self, name):
            return getattr(data, name)

        def eval_dataset(self, shard, batch_size):
            asked.append(batch_size)
            return data.eval_dataset(shard, batch_size)
    data, trainer.data = trainer.data, Recording()
    accuracy = trainer._evaluate("final")  # noqa: SLF001
    assert asked == [8] and 0.0 <= accuracy <= 1.0


class _Resize(Exception):
    pass


class ResizingKeeper:
    """Commits to memory every `commit_every` steps; at step `resize_at` the "ring"
    breaks, rolls back to the last commit and re-forms at world size `new_size`."""

    saves_on_stop = False

    def __init__(self, trainer, commit_every, resize_at, new_size):
        self.trainer, self.commit_every = trainer, commit_every
        self.resize_at, self.new_size = resize_at, new_size
        self.variables = list(trainer.model.variables) + list(trainer.step.optimizer.variables)
        self.commit(Position())
        self.starts, self.pauses = [], 0

    def commit(self, position):
        self.committed = (Position(position.step, position.epoch, position.epoch_examples),
                          [v.numpy() for v in self.variables])

    def run(self, attempt, pause):
        while True:
            try:
                return attempt()
            except _Resize:
                pause()
                self.pauses += 1
                for variable, value in zip(self.variables, self.committed[1]):
                    variable.assign(value)
                backend = self.trainer.backend
                backend.info = ProcessInfo(0, self.new_size)  # this process is rank 0 of it

    def restore(self):
        position = self.committed[0]
        self.starts.append((position, self.trainer.backend.info.size))
        return Position(position.step, position.epoch, position.epoch_examples,
                        launch_start=position.step == 0)

    def after_step(self, position, last):
        if position.step % self.commit_every == 0:
            self.commit(position)
        if position.step == self.resize_at and not self.pauses:
            raise _Resize()

    def facts(self):
        return {}

    def close(self):
        pass


def test_a_ring_re_formed_at_another_size_is_re_placed_mid_epoch():
    """Size 1 -> 2 at step 12, rolled back to the commit at step 10: the epoch goes on
    from its 320th example on the two-rank grid; the start is not evaluated again, the
    epoch's end and the last step are."""
    trainer = _trainer(epochs=2)
    keeper = ResizingKeeper(trainer, commit_every=5, resize_at=12, new_size=2)
    trainer.train(keeper)
    n = trainer.data.num_train_examples
    per_epoch_2 = sharding.steps_per_epoch(n, BATCH, 2)
    done_in_epoch = 10 * BATCH // (2 * BATCH)  # examples consumed at the commit, in steps of 2
    epoch_end = 10 + per_epoch_2 - done_in_epoch
    total = epoch_end + per_epoch_2
    assert keeper.pauses == 1
    assert keeper.starts == [(Position(), 1), (Position(10, 0, 10 * BATCH), 2)]
    assert trainer.grid.per_epoch == per_epoch_2 and trainer.global_step == trainer.total == total
    assert _steps(trainer.accuracy_history) == [0, epoch_end, total]
    # One interval before the resize (8), then every 8th step and the last one.
    assert _steps(trainer.loss_history) == [8, *range(16, total, 8), total]
    assert trainer.position == Position(total, 2, 0)


def test_every_source_continues_an_epoch_exactly_in_another_layout():
    """What lets a resume on another number of ranks continue any dataset's epoch
    exactly: in-memory sources cut it by global batch, record sources replay their order
    (data/rest.py; the records are checked in test_data_sources.py and test_data_tfds.py)."""
    from horovod_train.data import lmdb_source, rest, sources, tfds_source, tfrecord
    for source in (sources.ArrayData, sources.PooledData):
        assert source.by_global_batch and not rest.can_replay(source)
    for source in (tfrecord.TFRecordSource, lmdb_source.LmdbSource, tfds_source.TfdsSource):
        assert rest.can_replay(source) and not getattr(source, "by_global_batch", False)
    # pycorpus is read as a TFRecord dataset.
    assert set(data_lib._SOURCES) == {"digits", "synthetic", "tfrecord", "lmdb", "tfds",
                                      "pycorpus"}
