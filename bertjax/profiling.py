"""Traces of chosen train steps, for TensorBoard's profile plugin: `config.profile`.

`config.profile.steps = "A,B"` traces steps A to B (jax.profiler: the host's Python
and XLA threads, and on TPU and GPU the devices' ops) into `WORKDIR/profile/`; `''`
traces nothing. `tensorboard --logdir WORKDIR/profile` shows it in its Profile tab
(the `tensorboard-plugin-profile` package). `config.profile.hosts` is `first`
(process 0 traces) or `all` (every process, each into `WORKDIR/profile/` under its
host name). A resumed run traces what is left of A to B.
"""

import os

import jax
from absl import logging

from bertjax import workdir as workdir_lib
from data_pipeline.errors import ConfigError

HOSTS = ("first", "all")


def parse_steps(text: str) -> tuple[int, int] | None:
    """config.profile.steps as (first, last), or None for ''."""
    if not text.strip():
        return None
    parts = [part.strip() for part in text.split(",")]
    try:
        first, last = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        first = last = None
    if first is None or not 1 <= first <= last:
        raise ConfigError(
            f"config.profile.steps={text!r}: must be 'A,B', the first and last step to "
            "trace (1 <= A <= B), or 'A' for one step, or '' for none"
        )
    return first, last


def check(profile) -> None:
    parse_steps(profile.steps)
    if profile.hosts not in HOSTS:
        raise ConfigError(f"config.profile.hosts={profile.hosts!r}: must be one of {HOSTS}")


class Profiler:
    """Starts a trace before the first step of config.profile.steps this process runs
    and ends it once the last one's state is computed."""

    def __init__(self, profile, workdir: str, event_log):
        steps = parse_steps(profile.steps)
        here = profile.hosts == "all" or jax.process_index() == 0
        self.steps = steps if here else None
        self.dir = os.path.join(workdir, workdir_lib.PROFILE_DIR)
        self.event_log = event_log
        self.first = None  # the step the trace started at, while tracing

    def before(self, step: int) -> None:
        if self.steps and self.first is None and self.steps[0] <= step <= self.steps[1]:
            jax.profiler.start_trace(self.dir)
            self.first = step

    def after(self, step: int, state) -> None:
        if self.first is not None and step == self.steps[1]:
            jax.block_until_ready(state)  # the last step's work inside the trace
            self.close(step)

    def close(self, step: int) -> None:
        """Ends the trace in progress after `step` (also when the run stops inside it)."""
        if self.first is None:
            return
        jax.profiler.stop_trace()
        logging.info("profile of steps %d to %d in %s", self.first, step, self.dir)
        self.event_log.write("profile", first=self.first, last=step, dir=self.dir)
        self.first, self.steps = None, None
