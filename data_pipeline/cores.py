"""The cores this process may run on: what the online stream sizes tf.data's thread pool
by (pretraining_input.py) and what bertjax measures a CPU's peak FLOP/s on (bertjax/flops.py).

A module of its own that imports nothing, so that bertjax reads it without the
worker pool (workers.py) that the stream's processes come from.
"""

import os


def usable_cores() -> int:
    """The cores this process may run on (XLA's CPU thread pool is as large)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
