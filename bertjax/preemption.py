"""Stop requests: SIGTERM (what a preempted Cloud VM gets), Ctrl-C, and JAX's preemption notice.

A request is acted on at the next step boundary, never inside a step: the
loop saves a checkpoint of that step, waits for it to commit and raises
`Preempted` (exit status 75 from `python -m bertjax.main`). On several hosts
the step must be the same everywhere, so there JAX's preemption service
decides it: `jax.distributed.initialize` has the runtime catch SIGTERM, tell
every host, and `multihost_utils.reached_preemption_sync_point(step)` turns
true on all of them at one step. Ctrl-C on one host is turned into SIGTERM to
itself, so it takes the same path. A second Ctrl-C stops at once.
"""

import contextlib
import os
import signal
import threading

import jax
from absl import logging
from jax.experimental import multihost_utils

from data_pipeline import cli
from data_pipeline.errors import Preempted

__all__ = ["Preempted", "StopRequests", "stop_at_once"]


def _signals() -> tuple[int, ...]:
    """The signals we may handle: on several hosts the runtime's own SIGTERM handler stays."""
    return (signal.SIGINT,) if jax.process_count() > 1 else (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_at_once(what: str):
    """While open, SIGTERM and Ctrl-C end the program at once, as Preempted would (its
    line on stderr, exit status 75): for a command's last work that keeps nothing,
    such as the end-of-run report after the last checkpoint.

    The handler does not raise: Python runs it wherever native code checks for
    signals, and an exception unwinding through TensorFlow's tensor conversion there
    was seen to end in a segmentation fault.
    """

    def handle(number, frame):
        del frame
        name = signal.Signals(number).name
        cli.exit_preempted(Preempted(f"{name} during {what}; the run was saved before it"))

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handle) for number in _signals()}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class StopRequests:
    """A context manager: while it is open, SIGTERM and SIGINT ask the run to stop.

    `requested(step)` is called once per step, at the same steps on every host.
    """

    def __init__(self):
        self.signal_name: str | None = None
        self._distributed = jax.process_count() > 1
        self._previous = {}

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread
        for number in _signals():
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _handle(self, number, frame) -> None:
        del frame
        if self.signal_name is not None and number == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: do not wait for the save
        self.signal_name = signal.Signals(number).name
        logging.warning("%s: saving at the next step boundary", self.signal_name)
        if self._distributed:
            os.kill(os.getpid(), signal.SIGTERM)

    def requested(self, step: int) -> bool:
        """Whether to save `step` and stop."""
        if self._distributed:
            return multihost_utils.reached_preemption_sync_point(step)
        return self.signal_name is not None

    @property
    def pending(self) -> bool:
        """A request seen on this host that the loop has not acted on yet (for long phases
        such as an evaluation, which a single host may cut short)."""
        return self.signal_name is not None and not self._distributed
