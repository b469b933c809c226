"""What a long command is doing, told at most every 30 s: what runs, how far it is and about
how long is left, one line each time (a log file or a pipe shows it as it comes).

    progress = Progress("writing the train split", total=16, unit="corpus shards")
    progress.update(3)      # a line only when `every` seconds have passed since the last
    progress.finish()       # "...: finished in 12:00", after a line only

    with Progress("compiling the train step").start().heartbeat():
        compiled = lowered.compile()   # one call that cannot count: a thread tells the time

The lines:

    compiling the train step ...                                   start(), where the wait
                                                                   for a line would puzzle
    writing the train split: 3/16 corpus shards (19%), 2:00 so far, about 8:40 left
    counting the train split's words: 1,234,567 words, 0:30 so far     no total known
    still compiling the train step (2:30 so far)                       nothing counted
    compiling the train step: finished in 7:48

The time left is the rate since the start applied to what is left (work done before the
start, as by an earlier run of a resumed sweep, does not count in the rate), or, where
nothing is counted, `expected` seconds less the time so far; without either there is
no estimate. A run that ends before its first line prints nothing more than its start.

data_pipeline's tools and bertjax's use it alike: it imports no jax.
"""

import contextlib
import sys
import threading
import time

EVERY_S = 30.0


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """`what` (a phrase such as "compiling the train step") and how far it is: `done` of
    `total` `unit`, or `done` `unit` without a total, or nothing counted (no unit). `out`
    defaults to sys.stderr as it is when a line is written."""

    def __init__(
        self,
        what: str,
        total: int | None = None,
        *,
        unit: str = "",
        done: int = 0,
        expected: float | None = None,
        every: float | None = None,
        out=None,
        clock=time.monotonic,
    ):
        self.what, self.total, self.unit = what, total, unit
        self.done = self.first = done
        self.expected, self.out, self.clock = expected, out, clock
        self.every = EVERY_S if every is None else every
        self.started = self.last = clock()
        self.told = False  # whether a progress line was written
        self._lock = threading.Lock()

    def start(self) -> "Progress":
        self._write(f"{self.what} ...")
        return self

    def update(self, done: int) -> None:
        self.done = done
        if self.due():
            self.report()

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def due(self) -> bool:
        return self.clock() - self.last >= self.every

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float | None:
        """Seconds left by the estimate, or None without one."""
        elapsed = self.elapsed()
        if self.total is not None and self.done > self.first:
            return (self.total - self.done) * elapsed / (self.done - self.first)
        if self.total is None and not self.unit and self.expected is not None:
            return self.expected - elapsed if elapsed < self.expected else None
        return None

    def status(self) -> str:
        """How far it is: `3/16 corpus shards (19%), 2:00 so far, about 8:40 left`."""
        so_far = f"{format_duration(self.elapsed())} so far"
        left = self.left()
        estimate = "" if left is None else f", about {format_duration(left)} left"
        if self.total is not None:
            share = self.done / self.total if self.total else 1.0
            estimate = estimate or ", no estimate yet"
            return f"{self.done:,}/{self.total:,} {self.unit} ({share:.0%}), {so_far}{estimate}"
        if self.unit:
            return f"{self.done:,} {self.unit}, {so_far}{estimate}"
        return f"{so_far}{estimate}"

    def line(self) -> str:
        if self.total is None and not self.unit:
            return f"still {self.what} ({self.status()})"
        return f"{self.what}: {self.status()}"

    def report(self, note: str = "") -> None:
        """Writes the line now, with `note` after it (`...; running 003-seed=2 (1:05)`)."""
        with self._lock:
            line = self.line() + (f"; {note}" if note else "")
            self.last = self.clock()
            self.told = True
        self._write(line)

    def finish(self) -> None:
        """Says how long it took, where a progress line was written (a short run stays quiet)."""
        if self.told:
            self._write(f"{self.what}: finished in {format_duration(self.elapsed())}")

    @contextlib.contextmanager
    def heartbeat(self):
        """A line whenever one is due while the block runs, from a thread of its own (the
        block may be one call that cannot count, such as an XLA compile), then `finish`."""
        stop = threading.Event()

        def beat():
            # Until the next line is due by the clock, a second at most: a fake clock
            # that jumps is heard within a second.
            while not stop.wait(min(max(self.every - (self.clock() - self.last), 0.05), 1.0)):
                if self.due():
                    self.report()

        thread = threading.Thread(target=beat, name=f"progress: {self.what}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
        self.finish()

    def _write(self, line: str) -> None:
        out = self.out or sys.stderr
        out.write(line + "\n")  # one write: lines of several threads do not interleave
        out.flush()
