"""Our Python calls in tf.data's threads, ended before the interpreter finalizes
(pretraining_input's and the BPE tokenizer's)."""

import contextlib
import threading
import time


class PythonCalls:
    """Tracks a module's Python calls in tf.data's threads; `stop` lets them end at exit.

    A tf.data thread that enters Python once the interpreter finalizes never
    comes back, and an iterator still alive waits for it forever in its
    destructor (pretraining_input's module docstring): a stream abandoned at
    exit hung about one run in three. Once `stopping`, a call does no work, and
    `stop` waits until none has run for `quiet` seconds (counted from the stop
    itself too with `from_stop`), so the calls still queued pass through before
    finalization.
    """

    def __init__(self, quiet: float, *, from_stop: bool = False):
        self.stopping = False
        self._quiet, self._from_stop = quiet, from_stop
        self._count = 0
        self._last = 0.0  # time.monotonic() when a call last started or ended
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self):
        with self._lock:
            self._count += 1
            self._last = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                self._last = time.monotonic()

    def wrap(self, function):
        def counted(*args):
            with self.running():
                return function(*args)

        return counted

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping = True
        now = time.monotonic()
        if self._from_stop:
            with self._lock:
                self._last = max(self._last, now)
        deadline = now + timeout
        while (self._count or now - self._last < self._quiet) and now < deadline:
            time.sleep(0.01)
            now = time.monotonic()
