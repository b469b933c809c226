"""Pretrains or fine-tunes BERT: an experiment config with `config.task` fine-tunes.

    python -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir DIR \
        [--config.KEY=VALUE ...]
    python -m bertjax.main --config experiments/finetune/glue.py:mrpc --workdir DIR \
        --config.init_checkpoint=PRETRAINED_WORKDIR

Re-running the same command resumes from the workdir's latest checkpoint. This
is the only file that defines the training flags.
"""

import os
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from bertjax import checkpoint, finetune, report, sharding, train
from data_pipeline import config as data_config_lib
from data_pipeline.classification import TaskDataError
from data_pipeline.corpus import CorpusError
from data_pipeline.instances import NotNextError
from data_pipeline.tfrecords import TFRecordError
from data_pipeline.vocab import VocabError

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the vocab.")
_FILL_MASK_EXAMPLES = flags.DEFINE_integer(
    "fill_mask_examples", 0, "After training, show the model's guesses for N held-out sentences."
)
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Multi-host run: call jax.distributed.initialize() first (on Cloud TPU, SLURM, Open MPI or "
    "Kubernetes it finds the other hosts itself; elsewhere set JAX_COORDINATOR_ADDRESS, "
    "JAX_NUM_PROCESSES, JAX_PROCESS_ID).",
)

# Bad input and inconsistent configs: one line naming the key or file, no traceback.
USER_ERRORS = (
    data_config_lib.ConfigError,
    CorpusError,
    VocabError,
    NotNextError,
    TFRecordError,
    sharding.MeshError,
    checkpoint.CheckpointError,
    train.TrainingError,
    TaskDataError,
)


def initialize_distributed() -> None:
    """What --distributed does: joins the other processes of a multi-host run."""
    # jax reads JAX_COORDINATOR_ADDRESS itself but not the process count and index.
    count, index = os.environ.get("JAX_NUM_PROCESSES"), os.environ.get("JAX_PROCESS_ID")
    jax.distributed.initialize(
        num_processes=None if count is None else int(count),
        process_id=None if index is None else int(index),
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)
    if _DISTRIBUTED.value:
        initialize_distributed()
    if jax.process_count() > 1:
        logging.info("process %d of %d", jax.process_index(), jax.process_count())
    try:
        if "task" in _CONFIG.value:
            results = finetune.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
            if jax.process_index() == 0:
                finetune.print_results(results, out=sys.stdout)
            return
        last_eval = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
        if jax.process_index() == 0:
            report.print_report(
                _WORKDIR.value,
                _CONFIG.value,
                last_eval,
                fill_mask_examples=_FILL_MASK_EXAMPLES.value,
                out=sys.stdout,
            )
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)
