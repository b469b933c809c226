"""Hooks a test adds to a run as a user's own module would (bertjax/hooks.py): named in
config.hooks by import path ("support.run_hooks:ask_to_stop" with tests/ on the path;
"run_hooks:..." in multihost_worker.py, which runs from this folder), or handed to
train.train_and_evaluate(..., hooks=[...])."""

import jax
import numpy as np
from jax.experimental import multihost_utils

from bertjax.hooks import Hook

# The step after which the last process asks the run to stop (ask_to_stop).
STOP_ASKED_AT = 2

# Every call of gather_steps' hook in this process: the step of each host, from all hosts.
gathered: list[list[int]] = []


def gather_steps(session) -> Hook:
    """A collective hook: after each step, every host's step gathered from all of them,
    so hosts that called it at different steps would record different lists."""
    del session

    def call(step, state):
        del state
        gathered.append([int(s) for s in multihost_utils.process_allgather(np.int64(step))])

    return Hook(call, collective=True)


def ask_to_stop(session) -> Hook:
    """A hook of one host, the last process: after step STOP_ASKED_AT it asks the run to
    stop, as a user's hook that watches something of its own host would."""

    def call(step, state):
        del state
        if step == STOP_ASKED_AT and jax.process_index() == jax.process_count() - 1:
            session.stop.request(f"ask_to_stop on process {jax.process_index()}")

    return Hook(call, collective=False)
