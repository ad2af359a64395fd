"""A rank session's training job: `python trainer_job.py OUT FLAGS...` runs, in the rank
process the session already started, what `python -m horovod_train FLAGS...` runs in a
launch of its own (tests/ranks.py run_ranks; the job's FLAGS end with run_outputs(OUT),
its summary and weights): the same front door
(horovod_train.__main__.train: parse, validation, the start-up filter, loop.run), so the
run's files and lines are the ones a launch of its own leaves. This rank's stderr during
the job goes to OUT.stderr.rank<N>, beside OUT (which keeps only what the chief writes):
the tests read the config lines there, as they read a launch's stderr; a failed run
leaves its one line there and ends the rank with its exit code, as it would end a launch
of its own.

What a fresh process would not carry over from an earlier run is reset by rank_session.py
(fresh_start); the trainer itself resets the rest at each run (seeds, the dtype policy,
the watchdog, its signal handlers)."""
import contextlib
import os
import sys

import rank_session


@contextlib.contextmanager
def stderr_to(path: str):
    """fd 2 (Python's lines and the native libraries' alike) into `path`, then back."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as out:
        os.dup2(out.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def main(out: str, flags: list[str]) -> None:
    from horovod_train.__main__ import train
    rank = rank_session.this_rank(os.environ)
    with stderr_to(f"{out}.stderr.rank{rank}"):
        train(flags)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
