"""htk.state: one active strategy per process, explicit and resettable (local backend)."""
import pytest


pytest.importorskip("tensorflow")
import keras  # noqa: E402

import horovod_train.keras as htk  # noqa: E402
from horovod_train.errors import UsageError  # noqa: E402


@pytest.fixture
def fresh(monkeypatch):
    """No active strategy during the test; whatever was active comes back after it."""
    monkeypatch.setattr(htk.state, "_ACTIVE", None)


def test_same_options_are_the_same_strategy(fresh):
    first = htk.Strategy(backend="local")
    assert htk.state.active() is first
    again = htk.Strategy("local", intra_op_threads=0)  # the defaults, spelled out
    assert again is first and again.backend is first.backend
    assert first.options["backend"] == "local" and first.options["intra_op_threads"] == 0


def test_other_options_are_refused_naming_each_and_the_fix(fresh):
    htk.Strategy(backend="local")
    with pytest.raises(UsageError) as err:
        htk.Strategy(backend="local", intra_op_threads=3, compression="fp16")
    message = str(err.value)
    assert message.startswith("htk.Strategy(backend='local', intra_op_threads=3, "
                              "compression='fp16'): received options that differ")
    assert "compression='fp16' (joined with " in message  # the backend's default or unset
    assert "intra_op_threads=3 (joined with 0)" in message
    assert "Fix: pass the same options" in message and "htk.state.reset()" in message
    with pytest.raises(UsageError, match=r"\(backend='mwms' \(joined with 'local'\)\)"):
        htk.Strategy(backend="mwms")


def test_reset_forgets_the_strategy_and_the_next_one_has_its_own_options(fresh):
    first = htk.Strategy(backend="local")
    htk.state.reset()
    assert htk.state.active() is None
    second = htk.Strategy(backend="local", inter_op_threads=2)
    assert second is not first and htk.state.active() is second
    assert second.options["inter_op_threads"] == 2


def test_an_unbound_optimizer_without_a_strategy_names_the_fix(fresh):
    opt = htk.DistributedOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(UsageError, match="no htk.Strategy in this process.*Fix: create"):
        opt.strategy
    strategy = htk.Strategy(backend="local")
    assert opt.strategy is strategy  # unbound: the active one
