"""Stop requests: SIGTERM (what a preempted Cloud VM gets), Ctrl-C, JAX's preemption notice,
and a hook's (`StopRequests.request`, bertjax/hooks.py).

A request is acted on at the next step boundary, never inside a step: the
loop saves a checkpoint of that step, waits for it to commit and raises
`Preempted` (exit status 75 from `python -m bertjax.main`). On several hosts
the step must be the same everywhere, so there JAX's preemption service
decides it: `jax.distributed.initialize` has the runtime catch SIGTERM, tell
every host, and `multihost_utils.reached_preemption_sync_point(step)` turns
true on all of them at one step. Ctrl-C on one host is turned into SIGTERM to
itself, so it takes the same path, and so is a hook's request. A second Ctrl-C ends
the program at once, without the save, in one line (`Interrupted`, exit status 130)
that names the checkpoint a rerun resumes from (`checkpoints_in`).
"""

import contextlib
import os
import signal
import threading

import jax
from absl import logging
from jax.experimental import multihost_utils

from bertjax import workdir as workdir_lib
from data_pipeline import cli
from data_pipeline.errors import Interrupted, Preempted

__all__ = [
    "Interrupted",
    "Preempted",
    "StopRequests",
    "checkpoints_in",
    "second_ctrl_c",
    "stop_at_once",
]

# The workdir of this process's run while `checkpoints_in` is open.
_workdir: str | None = None


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


@contextlib.contextmanager
def checkpoints_in(workdir: str):
    """While open, the line that a second Ctrl-C ends the program with names the latest
    checkpoint in `workdir`: bertjax.main opens it around the run."""
    global _workdir
    previous, _workdir = _workdir, workdir
    try:
        yield
    finally:
        _workdir = previous


def second_ctrl_c(workdir: str | None) -> Interrupted:
    """What a second Ctrl-C ends the run in `workdir` with: the checkpoint the same
    command resumes from: the newest step with its manifest (a save in flight has none
    yet, and is left unfinished). The handler may run inside orbax's own calls (its
    event loop), so the folder is listed with os, not through TensorFlow's files; a
    bucket's is not listed at all."""
    stopped = "a second Ctrl-C stopped the run at once, without saving"
    if workdir is None or "://" in workdir:
        return Interrupted(f"{stopped}; run the same command to resume from its last checkpoint")
    try:
        names = os.listdir(workdir_lib.checkpoint_dir(workdir))
    except OSError:
        names = []
    directory = workdir_lib.checkpoint_dir(workdir)
    step = max(
        (
            int(name)
            for name in names
            if name.isdigit()
            and os.path.exists(os.path.join(directory, name, workdir_lib.CHECKPOINT_MANIFEST))
        ),
        default=None,
    )
    if step is None:
        return Interrupted(f"{stopped}; it has no checkpoint: the same command starts it over")
    return Interrupted(
        f"{stopped}; the latest checkpoint is step {step}: run the same command to resume from it"
    )


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
            # Ends the program here, as stop_at_once does, for the same reason: an exception
            # raised from the handler would unwind through whatever runs (orbax's event loop
            # printed a traceback per pending read; TensorFlow once crashed).
            cli.exit_interrupted(second_ctrl_c(_workdir))
            return
        self.signal_name = signal.Signals(number).name
        logging.warning("%s: saving at the next step boundary", self.signal_name)
        if self._distributed:
            os.kill(os.getpid(), signal.SIGTERM)

    def request(self, why: str) -> None:
        """Asks the run to stop as a signal does, for a hook that decides on this host
        alone: the loop saves a step and stops, on several hosts at a step they agree on.
        `why` opens the line the run stops with ("WHY at step N: ...")."""
        if self.signal_name is not None:
            return
        self.signal_name = why
        logging.warning("%s: saving at the next step boundary", why)
        if self._distributed:
            os.kill(os.getpid(), signal.SIGTERM)  # to the runtime: every host hears of it

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
