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

from absl import flags
from ml_collections import config_flags

from bertjax import program


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


if __name__ == "__main__":
    program.run("bertjax.experiment:main", define_flags)
