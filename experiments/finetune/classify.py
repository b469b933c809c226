"""Fine-tunes a classifier (or a regressor) on your own TSV, CSV or JSONL files.

    python -m bertjax.main --config experiments/finetune/classify.py --workdir runs/mytask \
        --config.init_checkpoint=runs/converted_bert \
        --config.data.train_file=train.tsv --config.data.eval_file=dev.tsv \
        --config.data.text_a=sentence --config.data.label=label

The format follows the extension (.tsv, .csv, .jsonl); the first row (or each
JSON object) names the columns. One text column by default; for sentence pairs
name the second with --config.data.text_b. The label set is read from the
training file; every data option is a field of
data_pipeline.finetune.classification_config.ClassificationConfig, which comments it.
Hardware: any; BERT-Base runs about 1 step/s at batch 32 x 128 on a recent GPU,
far slower on a CPU (bertjax.bench.throughput measures yours). Expected result: depends
on your data; results.json holds {"eval": {"accuracy": ...}, "best": ...}.
"""

import ml_collections

from data_pipeline.finetune import classification_config
from experiments.finetune import base


def get_config() -> ml_collections.ConfigDict:
    config = base.get_config()
    config.task = "classification"
    config.data = classification_config.default_config()
    return config


def get_hyper(hyper):
    """The paper's fine-tuning grid (Appendix A.3), 18 runs, chosen on the dev set:

    python -m bertjax.sweep run --config experiments/finetune/classify.py --sweep_dir runs/grid \
        --config.init_checkpoint=runs/converted_bert --config.data.train_file=... (as above)
    python -m bertjax.sweep report runs/grid
    """
    return hyper.product(
        [
            hyper.sweep("config.train_batch_size", [16, 32]),
            hyper.sweep("config.optimizer.learning_rate", [5e-5, 3e-5, 2e-5]),
            hyper.sweep("config.num_train_epochs", [2.0, 3.0, 4.0]),
        ]
    )
