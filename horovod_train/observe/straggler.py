"""The straggler: the rank the others wait for, interval after interval.

Every interval record holds each rank's wait per step for the slowest rank and which
rank that was (trainer.Trainer._log_interval, metrics.waits). One slow interval says
little (a checkpoint write, a page cache miss); the same rank slowest in most of them
is a slow host, a throttled GPU, a noisy neighbour, or data that is harder on its
shard. The chief says so once, when it is established (MOST of at least MIN_INTERVALS
intervals, the others waiting at least MIN_WAIT_SHARE of the step), and again at the end.
"""
import dataclasses
import statistics

MIN_INTERVALS = 3  # intervals that traced nothing, before "most of them" means anything
MOST = 0.75  # the share of intervals the same rank must be the slowest in
# How long the others must wait for it, as a share of the step (medians): below this,
# "slowest" is noise between equal ranks (on shared cores, a few percent either way).
MIN_WAIT_SHARE = 0.15


def wait_tags(world_size: int) -> tuple:
    """TensorBoard tags: each rank's wait per step for the slowest (ms)."""
    return tuple(f"straggler/wait_ms_rank{r}" for r in range(world_size)) \
        if world_size > 1 else ()


def wait_scalars(record: dict) -> dict:
    waits = record.get("wait_s_per_rank") or []
    return {f"straggler/wait_ms_rank{r}": 1000 * w for r, w in enumerate(waits)} \
        if len(waits) > 1 else {}


@dataclasses.dataclass
class StragglerWatch:
    world_size: int
    counts: dict = dataclasses.field(default_factory=dict)  # rank -> intervals slowest
    intervals: int = 0
    waits: list = dataclasses.field(default_factory=list)  # the others' median wait, each
    said: bool = False

    def add(self, record: dict) -> str | None:
        """Counts an interval that traced nothing; returns the warning the first time one
        rank is slowest in most of at least MIN_INTERVALS intervals."""
        slowest = record.get("slowest_rank")
        if self.world_size < 2 or slowest is None or record.get("traced"):
            return None
        self.intervals += 1
        self.counts[slowest] = self.counts.get(slowest, 0) + 1
        others = [w for r, w in enumerate(record["wait_s_per_rank"]) if r != slowest]
        self.waits.append((statistics.median(others), record["step_s"]))
        if self.said:
            return None
        line = self.verdict()
        self.said = line is not None
        return line

    def verdict(self) -> str | None:
        """'rank 1 slowest in 18 of 20 intervals: the others wait 41% of each step for
        it', or None when no rank is slowest in most intervals."""
        if self.intervals < MIN_INTERVALS:
            return None
        rank, count = max(self.counts.items(), key=lambda kv: kv[1])
        wait = statistics.median(w for w, _ in self.waits)
        step = statistics.median(s for _, s in self.waits) or 1e-9
        if count < MOST * self.intervals or wait < MIN_WAIT_SHARE * step:
            return None
        return (f"rank {rank} slowest in {count} of {self.intervals} intervals: the others "
                f"wait {1000 * wait:.0f} ms a step for it, {100 * wait / step:.0f}% of the step")
