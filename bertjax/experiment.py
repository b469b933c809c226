"""Runs an experiment config, python -m bertjax.main's work: joins the other hosts, points JAX's
compilation cache, trains the config's task and prints its report.
"""

import io
import os
import sys

import jax
from absl import logging

from bertjax import goodput, inference, preemption, tasks, train
from bertjax import workdir as workdir_lib


def initialize_distributed() -> None:
    """What --distributed does: joins the other processes of a multi-host run."""
    # jax reads JAX_COORDINATOR_ADDRESS itself but not the process count and index.
    count, index = os.environ.get("JAX_NUM_PROCESSES"), os.environ.get("JAX_PROCESS_ID")
    jax.distributed.initialize(
        num_processes=None if count is None else int(count),
        process_id=None if index is None else int(index),
    )


def compilation_cache_dir(config, workdir: str, current: str | None) -> str | None:
    """Where JAX's persistent compilation cache goes, so that a restarted run loads its
    compiled steps: config.compilation_cache_dir; if '', `current` (the directory
    JAX_COMPILATION_CACHE_DIR names) or else WORKDIR/compilation_cache; None for 'off'."""
    path = config.compilation_cache_dir
    if path == "off":
        return None
    return path or current or os.path.join(workdir_lib.absolute(workdir), "compilation_cache")


def main(args):
    if args.distributed:
        initialize_distributed()
    cache = compilation_cache_dir(args.config, args.workdir, jax.config.jax_compilation_cache_dir)
    jax.config.update("jax_compilation_cache_dir", cache)
    if jax.process_count() > 1:
        logging.info("process %d of %d", jax.process_index(), jax.process_count())
    task = tasks.for_config(args.config)
    with preemption.checkpoints_in(args.workdir):  # named if a second Ctrl-C ends the run
        results = train.train_and_evaluate(args.config, args.workdir, task=task)
    if jax.process_index() == 0:
        print(goodput.summary_line(args.workdir), flush=True)
    if task.report is None:
        return
    # Every host runs the report (restoring a checkpoint is collective); process 0 prints it.
    with preemption.stop_at_once("the end-of-run report"):
        task.report(
            inference.restore(args.workdir),
            args.config,
            results,
            fill_mask_examples=args.fill_mask_examples,
            out=sys.stdout if jax.process_index() == 0 else io.StringIO(),
        )
