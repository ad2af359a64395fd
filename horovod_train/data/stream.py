"""This rank's batches across epochs: a bounded group of epochs per iterator, the next
group built ahead of its seam. (A source that builds epochs lazily, the in-memory ones,
is read from one iterator for the whole run: pipeline.train_epochs.)

Why bounded: an epoch's pipeline holds that epoch's order (and, for in-memory sets, its
permuted copy of the data). Joining every epoch's into one iterator before step 1 made
memory and start-up linear in --epochs: 1,000 epochs ran no step in 9 minutes and took
12 GB per rank (issue 46). Here at most two groups exist: the current one and the next.

Why groups, not one epoch each: a new iterator costs tf.data's set-up (Python and
graph rewrites: ~3.5 ms an epoch for digits as in-memory pipelines) and short epochs
pay it often: the bundled digits have 22 steps an epoch on 2 ranks (60 ms). A group
joins epochs until it holds GROUP_STEPS steps or GROUP_BYTES of batches, whichever
comes first (group_size), so long epochs still go one at a time and small ones are
joined.

Why ahead: the next group is made at the seam before its own, with warm start (its
prefetch starts when the iterator is made, not at its first batch), so its buffers fill
while the current group trains and its seam finds the first batches ready. It is made
on the thread that reads the stream, not a helper thread: an iterator made on a helper
thread and read on the loop's delivered 0.2-0.4x the batches per second (digits as 4
TFRecords, M6 in docs/benchmarks.md); making one costs the loop a few milliseconds once
a group, on every rank at the same seam.

The loop walks the epochs itself (`current`, then `advance()` at each epoch's end): it
knows where an epoch ends (steps per epoch, the same on every rank), and its compiled
step fetches from `current` directly (feed.py). Iterating the stream walks them too.
"""
import concurrent.futures

GROUP_STEPS = 512  # a group's steps: enough that its set-up is noise
GROUP_BYTES = 64 << 20  # a group's batches, in bytes: what the memory bound costs at most


def group_size(per_epoch: int, batch_bytes: int) -> int:
    """Epochs per iterator: up to GROUP_STEPS steps and GROUP_BYTES of batches, at least
    one epoch; one epoch when the batch's size is unknown (0). Pure."""
    if batch_bytes <= 0:
        return 1
    by_steps = -(-GROUP_STEPS // max(1, per_epoch))
    by_bytes = GROUP_BYTES // max(1, per_epoch * batch_bytes)
    return max(1, min(by_steps, by_bytes))


class EpochStream:
    """Iterators over epochs [first, end): `current` reads the epoch `epoch`, None after
    the last. `make(start, stop)` builds one iterator over epochs [start, stop); the
    first holds `first_group` epochs (all of them for a lazily built source), and
    `group(iterator)` (the first's batch size known then) says how many epochs each
    later one holds. Each later group is made one seam early, and an error making it is
    raised by advance() at its own seam, where it would have been needed."""

    def __init__(self, make, first: int, end: int, group, first_group: int = 1):
        self._make, self._end = make, end
        self.epoch = first
        self._stop = min(end, first + max(1, first_group))  # the epoch after current's last
        self.current = make(first, self._stop) if first < end else None
        self._group = group(self.current) if self._stop < end else 1
        self._ahead = self._prepare(self._stop)

    def _prepare(self, start: int):
        if start >= self._end:
            return None
        stop = min(self._end, start + self._group)
        made = concurrent.futures.Future()  # holds the iterator, or the error for advance()
        try:
            made.set_result(self._make(start, stop))
        except Exception as err:  # noqa: BLE001 - re-raised unchanged at its seam
            made.set_exception(err)
        return stop, made

    def advance(self):
        """The current epoch is done. Within a group the same iterator reads on; at its
        end the group made ahead becomes current, and the one after is made."""
        self.epoch += 1
        if self.epoch < self._stop:
            return
        ahead, self._ahead = self._ahead, None
        self.current = None
        if ahead is not None:
            self._stop, future = ahead
            self.current = future.result()
        self._ahead = self._prepare(self._stop)

    def __iter__(self):
        while self.current is not None:
            yield from self.current
            self.epoch = self._stop - 1  # the iterator ran to its group's end
            self.advance()

    def close(self):
        """Drops the group built ahead (an elastic reset, or the end of training)."""
        self.current = self._ahead = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
