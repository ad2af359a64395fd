"""The chief's file writes, off the training thread.

Writing an interval's TensorBoard scalars and its metrics.jsonl line costs a few ms
(a compiled summary call, JSON, a flush): about 1-2% of a 10 ms step when taken once
per 20-step interval. On one daemon thread, in submission order, the training thread
pays only a queue put; an idle core (every GPU host has some) does the writing.
"""
import queue
import threading


class BackgroundWriter:
    """Runs submitted writes in order on one thread; close() drains and joins.

    A write that fails is re-raised in the training thread at the next submit, flush or
    close, so a full disk is still reported, one interval late at most. The failure
    stays raised: every later call raises it again, so no caller can lose it by
    catching it once, and nothing after it is written (it would only fail too)."""

    def __init__(self):
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="observe-writer", daemon=True)
        self._thread.start()

    def submit(self, fn, *args):
        self._raise_if_failed()
        self._queue.put((fn, args))

    def flush(self):
        """Waits until every write submitted so far has run (tests; the end of a run)."""
        self._queue.join()
        self._raise_if_failed()

    def close(self):
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_if_failed()

    def _run(self):
        while (item := self._queue.get()) is not None:
            fn, args = item
            if self._error is None:
                try:
                    fn(*args)
                # BaseException too: a SystemExit raised inside a write would otherwise
                # end this thread with a traceback from threading's hook, and the run
                # would go on with nothing written and nothing said.
                except BaseException as err:  # noqa: BLE001 - handed to the training thread
                    self._error = err
            self._queue.task_done()
        self._queue.task_done()

    def _raise_if_failed(self):
        if self._error is not None:
            raise self._error
