"""Elastic runs: ranks leave and join, training goes on.

Run every rank with --elastic under
    horovodrun -np 2 --min-np 1 --max-np 3 --host-discovery-script ./hosts.sh ...
Every --elastic_commit_every steps the ranks *commit*: the training state is copied to
host memory and the driver's host changes are checked. When a rank dies, the others
roll back to the last commit, re-form the ring at the new size and go on; when hosts
are added, the ranks stop at the next commit and re-form with the newcomers. Steps
after the last commit are redone, never lost twice; committed ones are never lost.

Progress is counted in examples, not steps: with a fixed per-rank batch, a step's size
changes with the world size, so the position in an epoch is "examples consumed", and
a re-formed ring resumes the epoch at that offset, re-sharded over the new ranks (the
Trainer re-places itself on the new grid at every attempt).

This module is the state keeper (see trainer.py) and imports no Horovod: the ring it
commits to comes from backends/horovod_elastic.py.
"""
from absl import logging

from horovod_train.trainer_types import Position


class ElasticKeeper:
    """The state keeper of elastic runs: in-memory commits on a Horovod ring."""

    saves_on_stop = False  # in-memory commits do not outlive the process

    def __init__(self, ring, backend, commit_every: int):
        self.ring, self.backend, self.commit_every = ring, backend, commit_every
        self.resizes = []  # (step, world size) at every (re)start of the ring

    def run(self, attempt, pause=lambda: None):
        return self.ring.run(attempt, pause)

    def restore(self) -> Position:
        """The ring's shared progress (rank 0's, after the sync of a (re)start)."""
        progress, size = self.ring.progress, self.backend.info.size
        self.resizes.append((progress["step"], size))
        logging.info("elastic | ring of %d ranks | from step %d (epoch %d, example %d of it)",
                     size, progress["step"], progress["epoch"], progress["epoch_examples"])
        # Every rank holds the same progress, so all agree on whether this is the start.
        return Position(progress["step"], progress["epoch"], progress["epoch_examples"],
                        launch_start=progress["step"] == 0)

    def after_step(self, position: Position, last: bool):
        self.ring.progress = {"step": position.step, "epoch": position.epoch,
                              "epoch_examples": position.epoch_examples}
        if position.step % self.commit_every == 0:
            self.ring.commit()
            logging.info("elastic | committed step %d", position.step)
            self.ring.check_host_updates()  # raises HostsUpdatedInterrupt on a change

    def facts(self) -> dict:
        return {"elastic_resizes": self.resizes, "elastic_steps": self.ring.progress["step"]}

    def close(self):
        """Nothing held: the commits live in this process's memory."""


def keeper(backend, variables, commit_every: int) -> ElasticKeeper:
    """The elastic keeper over `variables` (imports Horovod: only when asked for)."""
    from horovod_train.backends.horovod_elastic import Ring
    return ElasticKeeper(Ring(backend, variables), backend, commit_every)
