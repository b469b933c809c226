r"""Trains the task an experiment config names (`config.task`; pretraining when absent).

    python -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir DIR \
        [--config.KEY=VALUE ...]
    python -m bertjax.main --config experiments/finetune/glue.py:mrpc --workdir DIR \
        --config.init_checkpoint=PRETRAINED_WORKDIR

Re-running the same command resumes from the workdir's latest checkpoint. On
SIGTERM or Ctrl-C the run saves the step in hand and exits with status 75
(`Preempted`); run the same command to go on; the compiled steps come from
JAX's compilation cache (config.compilation_cache_dir). A second Ctrl-C ends it at
once, without that save, with status 130 and a line naming the latest checkpoint.
This is the only file that defines the training flags.
"""

import io
import os
import sys

from absl import flags, logging
from ml_collections import config_flags

from bertjax import goodput, program

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the vocab.")
    flags.DEFINE_integer(
        "fill_mask_examples",
        0,
        "After training, show the model's guesses for N held-out sentences.",
    )
    flags.DEFINE_bool(
        "distributed",
        False,
        "Multi-host run: call jax.distributed.initialize() first (on Cloud TPU, SLURM, Open MPI "
        "or Kubernetes it finds the other hosts itself; elsewhere set JAX_COORDINATOR_ADDRESS, "
        "JAX_NUM_PROCESSES, JAX_PROCESS_ID).",
    )
    flags.mark_flags_as_required(["config", "workdir"])


def initialize_distributed() -> None:
    """What --distributed does: joins the other processes of a multi-host run."""
    import jax

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
    from bertjax import workdir as workdir_lib

    path = config.compilation_cache_dir
    if path == "off":
        return None
    return path or current or os.path.join(workdir_lib.absolute(workdir), "compilation_cache")


def main(argv):
    del argv  # cli.run refuses positional arguments
    # Imported here, not at the top: `--help`, a bad flag or a bad config key answer
    # in a fraction of a second instead of after seconds of TensorFlow and JAX imports.
    import jax

    from bertjax import inference, preemption, tasks, train

    if FLAGS.distributed:
        initialize_distributed()
    cache = compilation_cache_dir(FLAGS.config, FLAGS.workdir, jax.config.jax_compilation_cache_dir)
    jax.config.update("jax_compilation_cache_dir", cache)
    if jax.process_count() > 1:
        logging.info("process %d of %d", jax.process_index(), jax.process_count())
    task = tasks.for_config(FLAGS.config)
    with preemption.checkpoints_in(FLAGS.workdir):  # named if a second Ctrl-C ends the run
        results = train.train_and_evaluate(FLAGS.config, FLAGS.workdir, task=task)
    if jax.process_index() == 0:
        print(goodput.summary_line(FLAGS.workdir), flush=True)
    if task.report is None:
        return
    # Every host runs the report (restoring a checkpoint is collective); process 0 prints it.
    with preemption.stop_at_once("the end-of-run report"):
        task.report(
            inference.restore(FLAGS.workdir),
            FLAGS.config,
            results,
            fill_mask_examples=FLAGS.fill_mask_examples,
            out=sys.stdout if jax.process_index() == 0 else io.StringIO(),
        )


if __name__ == "__main__":
    program.run(main, define_flags)
