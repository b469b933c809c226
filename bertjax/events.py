"""The run's event log, `WORKDIR/events.jsonl`: where the wall time of every process that
worked in the workdir went, one JSON object per line, appended by process 0.

Unlike metrics.jsonl it is never cut back on resume: the steps a killed process trained
after its last checkpoint stay in it, which is how bertjax.goodput counts them as lost.
Every line has `event`, `time` (Unix seconds when it was written) and `compile_total`
(seconds the process has spent in JAX's tracing and compiling so far); a span also
has `seconds` (its length, ending at `time`) and `compile` (its part of that). The
events:

    start       a process began work in the workdir (its run built, its data found):
                `host`, `pid`, `process_count`, `devices`, `started` (when the process
                itself started) and `step` (the step it resumes after, 0 for none)
    restore     span: the checkpoint of `step` read and verified before training
    steps       span: steps `first` to `last` (evaluations and saves left out; one after a
                process's first step, at each train line, before each other span and at
                least every 10 s), of which
                `input_wait` seconds waiting for the host pipeline; `flops` (model FLOPs
                of those steps, all devices) and `peak_flops` (of all devices, or null)
    eval        span: an evaluation at `step`
    checkpoint  span: the loop stopped for the save of `step` (orbax writes on in the
                background); `bytes` of the train state
    profile     a trace of steps `first` to `last` written to `dir`
    signal      a stop request (`name`) seen at `step`
    stop        the process stopped work at `step`: `reason` done (the run's steps
                trained), paused (the steps it was asked to train, before the run's
                last: train_and_evaluate's stop_after), preempted, interrupted or
                error (with `error`, its first line)

A process killed with kill -9 writes no stop event: its last event marks its end.
"""

import contextlib
import json
import os
import socket
import threading
import time

import jax
import psutil
import tensorflow as tf

from bertjax import workdir as workdir_lib

# JAX's duration events of tracing, lowering and compiling: together, a process's compile
# time. The backend-compile event includes loading a program from the persistent cache,
# which JAX also times on its own (/jax/compilation_cache/cache_retrieval_time_sec).
_COMPILE_EVENTS = ("/jax/core/compile/",)
_compile = {"seconds": 0.0, "listening": False}
_compile_lock = threading.Lock()


def _on_duration(name: str, seconds: float, **kwargs) -> None:
    del kwargs
    if name.startswith(_COMPILE_EVENTS):
        with _compile_lock:
            _compile["seconds"] += seconds


def compile_seconds() -> float:
    """Seconds this process has spent compiling since the first call (which starts the
    count)."""
    with _compile_lock:
        if not _compile["listening"]:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _compile["listening"] = True
        return _compile["seconds"]


def process_started() -> float:
    """When this process started, in Unix seconds. On Linux from its start in clock ticks
    since boot (psutil's create_time adds a boot time rounded to the second)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.time() - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return psutil.Process().create_time()


class EventLog:
    """Appends events to WORKDIR/events.jsonl on process 0; the other processes write
    nothing. Each line is flushed as it is written, so a kill loses none."""

    def __init__(self, workdir: str):
        self.active = jax.process_index() == 0
        self.step = 0  # the last step trained (or restored): where a stop leaves the run
        compile_seconds()  # counting from here
        if self.active:
            tf.io.gfile.makedirs(workdir)
            self._file = tf.io.gfile.GFile(os.path.join(workdir, workdir_lib.EVENTS_FILE), "a")

    def write(self, event: str, **fields) -> None:
        if not self.active:
            return
        record = {
            "event": event,
            "time": round(time.time(), 3),
            **fields,
            "compile_total": round(compile_seconds(), 3),
        }
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def start(self, step: int) -> None:
        """The `start` event of this process, resuming after `step` (0: none)."""
        self.step = step
        self.write(
            "start",
            host=socket.gethostname(),
            pid=os.getpid(),
            process_count=jax.process_count(),
            devices=jax.device_count(),
            started=round(process_started(), 3),
            step=step,
        )

    def stop(self, error: BaseException | None, *, paused: bool = False) -> None:
        """The `stop` event: why this process stopped working, after `error` or None
        (`paused`: before the run's last step, as it was asked to)."""
        fields = {}
        if error is None:
            reason = "paused" if paused else "done"
        elif type(error).__name__ == "Preempted":
            reason = "preempted"
        elif isinstance(error, KeyboardInterrupt) or type(error).__name__ == "Interrupted":
            reason = "interrupted"
        else:
            reason = "error"
            lines = str(error).strip().splitlines()
            fields["error"] = f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
        self.write("stop", step=self.step, reason=reason, **fields)

    @contextlib.contextmanager
    def span(self, event: str, **fields):
        """Times the block as `event`; written when the block ends without an error."""
        stopwatch = Stopwatch()
        yield
        self.write(event, **fields, **stopwatch.stop().fields())

    def close(self) -> None:
        if self.active:
            self._file.close()


class Stopwatch:
    """A span's `seconds` and `compile` seconds, from construction to `stop`."""

    def __init__(self):
        self.started, self.compiled = time.perf_counter(), compile_seconds()
        self.seconds = self.compile = None

    def stop(self) -> "Stopwatch":
        self.seconds = time.perf_counter() - self.started
        self.compile = compile_seconds() - self.compiled
        return self

    def fields(self) -> dict:
        return {"seconds": round(self.seconds, 4), "compile": round(self.compile, 4)}


class StepTimes:
    """The `steps` events: the loop's time since the last one, less the spans (evaluations,
    saves), with the part spent waiting for input and compiling. `flush` writes the steps
    so far; `span` flushes, times the block and starts a new window after it; `stepped`
    flushes after a process's first step (its compile on record at once) and whenever
    `every_seconds` have passed, so that what a kill -9 leaves unrecorded is at most that."""

    def __init__(self, log: EventLog, step: int, *, peak_flops, every_seconds: float = 10.0):
        self.log, self.peak_flops, self.every_seconds = log, peak_flops, every_seconds
        self.start_step = step
        self._restart(step)

    def stepped(self, step: int, flops: float = 0.0) -> None:
        """After each step, with its model FLOPs."""
        self.flops += flops
        if step == self.start_step + 1 or (
            time.perf_counter() - self.stopwatch.started >= self.every_seconds
        ):
            self.flush(step)

    def _restart(self, step: int) -> None:
        self.last, self.stopwatch, self.input_wait, self.flops = step, Stopwatch(), 0.0, 0.0

    def waited(self, seconds: float) -> None:
        self.input_wait += seconds

    def flush(self, step: int) -> None:
        """Writes the `steps` event of the steps after the last flush up to `step`."""
        if step > self.last:
            self.log.write(
                "steps",
                first=self.last + 1,
                last=step,
                **self.stopwatch.stop().fields(),
                input_wait=round(self.input_wait, 4),
                flops=self.flops,
                peak_flops=self.peak_flops,
            )
            self.log.step = step
        self._restart(step)

    @contextlib.contextmanager
    def span(self, event: str, step: int, **fields):
        self.flush(step)
        try:
            with self.log.span(event, step=step, **fields):
                yield
        finally:
            self._restart(step)
