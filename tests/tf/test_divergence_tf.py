"""The divergence guard in one process: the weight checksum (eager and inside a
tf.function), the gather and check against a stand-in peer, and the points where the
trainer checks."""
import numpy as np
import pytest


tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import models  # noqa: E402
from horovod_train import checkpoint, divergence, schedules  # noqa: E402
from horovod_train import config as cfg  # noqa: E402
from horovod_train import data as data_lib  # noqa: E402
from horovod_train.backends.base import ProcessInfo  # noqa: E402
from horovod_train.backends.comm import Communicator  # noqa: E402
from horovod_train.backends.local import LocalBackend  # noqa: E402
from horovod_train.grid import epoch_grid  # noqa: E402
from horovod_train.trainer import Trainer  # noqa: E402
from horovod_train.trainer_types import CheckpointKeeper  # noqa: E402
from horovod_train.trainer_types import TrainerOptions  # noqa: E402


def _model(name="digits_cnn", seed=0):
    keras.utils.set_random_seed(seed)
    return models.get_model(name, input_shape=(8, 8, 1), num_classes=10)


def _bits(tensor) -> bytes:
    return np.asarray(tensor).tobytes()


def test_the_checksum_is_sum_and_sum_of_squares_in_float64():
    weights = _model().trainable_variables
    got = divergence.checksum(weights)
    assert got.dtype == tf.float64 and got.shape == (2,)
    flat = np.concatenate([np.ravel(w.numpy()).astype(np.float64) for w in weights])
    np.testing.assert_allclose(got.numpy(), [flat.sum(), (flat * flat).sum()], rtol=1e-12)


def test_the_checksum_is_the_same_bits_eagerly_and_inside_a_tf_function():
    weights = _model().trainable_variables
    traced = tf.function(lambda: divergence.checksum(weights))
    assert _bits(traced()) == _bits(divergence.checksum(weights))


def test_the_checksum_takes_keras_variables_tf_variables_and_tensors():
    values = [np.arange(6, dtype=np.float32).reshape(2, 3), np.full([5000], 0.5, np.float32)]
    expected = _bits(divergence.checksum([tf.constant(v) for v in values]))
    assert _bits(divergence.checksum([tf.Variable(v) for v in values])) == expected
    assert _bits(divergence.checksum([keras.Variable(v) for v in values])) == expected
    assert divergence.checksum([values[0]]).numpy().tolist() == [15.0, 55.0]


def test_the_checksum_of_nothing_is_zero():
    assert divergence.checksum([]).numpy().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("delta", ["1e-3", "one float32 ulp"])
def test_different_weights_give_different_checksums(delta):
    model = _model()
    before = _bits(divergence.checksum(model.trainable_variables))
    kernel = model.trainable_variables[0]
    value = kernel.numpy()
    flat = value.reshape(-1)
    flat[3] = flat[3] + 1e-3 if delta == "1e-3" else np.nextafter(flat[3], np.float32(1))
    kernel.assign(value)
    assert _bits(divergence.checksum(model.trainable_variables)) != before


def test_another_initialisation_gives_another_checksum():
    one, two = (_bits(divergence.checksum(_model(seed=s).trainable_variables)) for s in (0, 1))
    assert one != two


class PeerComm(Communicator):
    """This process as rank 1 of 2; rank 0's row is `peer`: allgather puts it above
    ours, as a real ring would. Counts its collectives."""
    reaches_peers = True

    def __init__(self, backend, peer):
        super().__init__(backend)
        self.peer, self.collectives = np.asarray(peer, np.float64), 0

    def allgather(self, tensor):
        self.collectives += 1
        return tf.constant(np.vstack([self.peer.reshape(1, -1), tensor.numpy()]))


class PeerOfRank1(LocalBackend):
    def __init__(self, peer):
        super().__init__()
        self.peer = peer

    def setup(self):
        self.info = ProcessInfo(rank=1, size=2)
        self.comm = PeerComm(self, self.peer)
        return self.info


def _ring(peer):
    backend = PeerOfRank1(peer)
    backend.setup()
    return backend


def test_gather_is_one_collective_giving_every_ranks_row():
    mine = tf.constant([3.0, -2.5], tf.float64)
    backend = _ring([1.0, 7.0])
    rows = divergence.gather(backend, mine)
    assert backend.comm.collectives == 1 and rows.shape == (2, 2) and rows.dtype == np.float64
    assert rows.tolist() == [[1.0, 7.0], [3.0, -2.5]]


def test_check_passes_on_identical_weights_and_names_the_rank_that_differs():
    weights = _model().trainable_variables
    same = divergence.checksum(weights).numpy()
    divergence.check(_ring(same), weights, 10, "epoch 1 end")
    with pytest.raises(divergence.RanksDiverged) as err:
        divergence.check(_ring(same + [1e-3, 0.0]), weights, 22, "epoch 1 end")
    assert err.value.ranks == [1] and err.value.step == 22
    assert "step 22" in str(err.value) and "epoch 1 end" in str(err.value)


def test_check_on_one_rank_calls_no_collective():
    backend = PeerOfRank1([0.0, 0.0])
    backend.setup()
    backend.info = ProcessInfo()
    assert divergence.check(backend, _model().trainable_variables, 1, "epoch 1 end") is None
    assert backend.comm.collectives == 0


def test_a_backend_without_communication_has_no_peer_to_compare_with():
    """A one-process backend told it is rank 0 of 2 (as tests/tf/test_trainer.py
    re-forms a ring): its one-process allgather would hold no row for the peer."""
    backend = LocalBackend()
    backend.setup()
    backend.info = ProcessInfo(0, 2)
    assert divergence.check(backend, _model().trainable_variables, 1, "epoch 1 end") is None


# -- where the trainer checks -------------------------------------------------------

def _trainer(epochs, every, max_steps=0):
    config = cfg.RunConfig(
        model="digits_mlp",
        train=cfg.TrainConfig(epochs=epochs, log_every=10, eval_every_epochs=0,
                              max_steps=max_steps, divergence_check_steps=every),
        runtime=cfg.RuntimeConfig(backend="local"))
    keras.utils.set_random_seed(0)
    backend = LocalBackend()
    backend.setup()
    data = data_lib.load(config.data)
    grid = epoch_grid(data.num_train_examples, config.data.batch_size, 1, epochs, max_steps)
    model = models.get_model(config.model, input_shape=data.input_shape,
                             num_classes=data.num_classes)
    schedule = schedules.lr_schedule(config.optim, 1, grid.per_epoch)
    optimizer = schedules.make_optimizer(config.optim, schedule)
    optimizer.build(model.trainable_variables)
    trainer = Trainer(TrainerOptions.from_config(config, jit_compile=False), backend, data,
                      model, optimizer, grid,
                      learning_rate=schedule)
    keeper = CheckpointKeeper(checkpoint.Checkpointer(config, backend, [], grid.per_epoch), grid)
    return trainer, keeper


@pytest.fixture
def checks(monkeypatch):
    """The trainer's calls of divergence.check: (step, where, the variables' count)."""
    seen = []

    def record(backend, variables, step, where):
        seen.append((step, where, len(variables)))
        return np.zeros((2, 2))  # as if two ranks compared equal
    monkeypatch.setattr(divergence, "check", record)
    return seen


def test_the_trainer_checks_its_trainable_weights_at_epoch_ends_and_the_last_step(checks):
    """Short epochs: the first epoch end, then those that cross a multiple of MIN_STEPS
    (none here), and the last step."""
    trainer, keeper = _trainer(epochs=2, every=0)
    trainer.train(keeper)
    p = trainer.grid.per_epoch
    assert p < divergence.MIN_STEPS_BETWEEN_EPOCH_CHECKS
    assert [(s, w) for s, w, _ in checks] == [(p, "epoch 1 end"), (2 * p, "the last step")]
    assert {n for _, _, n in checks} == {len(trainer.model.trainable_variables)}
    assert trainer.divergence_checks == 2


def test_with_an_interval_the_trainer_also_checks_every_n_steps_and_at_the_last(checks):
    trainer, keeper = _trainer(epochs=3, every=15, max_steps=100)
    trainer.train(keeper)
    p = trainer.grid.per_epoch  # 44 steps of 32 digits
    # The first epoch end, the N-step points and the last step; epoch 2 (ending at 88)
    # crossed no multiple of MIN_STEPS, so it is not compared.
    assert [s for s, _, _ in checks] == sorted([*range(15, 101, 15), p, 100])
    where = dict((s, w) for s, w, _ in checks)
    assert where[p] == "epoch 1 end" and where[100] == "the last step"
    assert where[15] == "step 15 (--divergence_check_steps=15)"
