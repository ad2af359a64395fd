"""The time to the first step, by phase: where a launch spends its start-up.

A rank's start-up runs in a fixed order: the process starts and imports (the
interpreter, absl, TensorFlow), joins the backend, opens and verifies its data,
builds the model and optimizer (and receives rank 0's weights), restores a checkpoint
and opens the input pipeline, then runs its first step, which traces (compiles) the
step. A StartupClock marks the end of each phase in seconds since the process started
(metrics.process_age_s), so the phases add up to the time to the first step.

The chief prints its own phases in one `start-up |` line after its first step;
summary.json holds every rank's (startup_s_per_rank).
"""
import dataclasses

# (key, what the console calls it) in the order the phases run. The key is the name in
# summary.json; "imports" is everything before the run begins (interpreter, TensorFlow,
# flag parsing), "restore" also covers opening the input pipeline and --eval_at_start.
PHASES = (("imports", "imports"), ("join", "backend join"), ("data", "data open+verify"),
          ("model", "model build"), ("restore", "restore+pipeline"),
          ("first_step", "first step (tracing)"))
KEYS = tuple(key for key, _ in PHASES)


def _process_age() -> float:
    from horovod_train import metrics
    return metrics.process_age_s()


@dataclasses.dataclass
class StartupClock:
    """Phase ends, in seconds since the process started. The first mark of a phase
    counts: an elastic ring that re-forms does not start up again."""
    age: object = _process_age  # () -> seconds since the process started
    ends: dict = dataclasses.field(default_factory=dict)

    def mark(self, key: str) -> None:
        if key not in KEYS:
            raise ValueError(f"unknown start-up phase {key!r}; expected one of {KEYS}")
        if key not in self.ends:  # the trainer marks at every step: read the clock once
            self.ends[key] = self.age()

    @property
    def done(self) -> bool:
        return KEYS[-1] in self.ends

    def seconds(self) -> dict:
        """{phase: seconds} for the phases marked, each from the previous mark (the
        process start for the first), to the millisecond, and "total": their sum."""
        out, before = {}, 0.0
        for key in KEYS:
            if key in self.ends:
                out[key] = round(max(self.ends[key] - before, 0.0), 3)
                before = self.ends[key]
        return dict(out, total=round(sum(out.values()), 3))

    def row(self) -> list:
        """The phases as a fixed-length row for a gather across ranks (0: not marked)."""
        seconds = self.seconds()
        return [seconds.get(key, 0.0) for key in KEYS]


def from_row(row) -> dict:
    """A gathered row back into {phase: seconds, "total": ...}."""
    seconds = {key: round(float(v), 3) for key, v in zip(KEYS, row)}
    return dict(seconds, total=round(sum(seconds.values()), 3))


def line(seconds: dict) -> str:
    """The console's `start-up |` line: the total, then each phase and its share."""
    total = seconds.get("total") or sum(seconds.get(k, 0.0) for k in KEYS)
    parts = [f"{label} {seconds[key]:.1f} s ({100 * seconds[key] / total:.0f}%)"
             if total > 0 else f"{label} {seconds[key]:.1f} s"
             for key, label in PHASES if key in seconds]
    return f"start-up | {total:.1f} s to the first step: " + " | ".join(parts)
