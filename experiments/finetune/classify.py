"""Fine-tunes a classifier (or a regressor) on your own TSV, CSV or JSONL files.

    python -m bertjax.main --config experiments/finetune/classify.py --workdir runs/mytask \
        --config.init_checkpoint=runs/converted_bert \
        --config.data.train_file=train.tsv --config.data.eval_file=dev.tsv \
        --config.data.text_a=sentence --config.data.text_b='' --config.data.label=label

The format follows the extension (.tsv, .csv, .jsonl); the first row (or each
JSON object) names the columns. The label set is read from the training file.
Hardware: any; BERT-Base runs about 1 step/s at batch 32 x 128 on a recent GPU,
far slower on a CPU (bertjax.benchmark measures yours). Expected result: depends
on your data; results.json holds {"eval": {"accuracy": ...}, "best": ...}.
"""

import ml_collections

from experiments.finetune import base


def get_data_config() -> ml_collections.ConfigDict:
    """Every field of data_pipeline.classification.ClassificationConfig."""
    data = ml_collections.ConfigDict()
    # 'files' (below) or 'glue' (TFDS glue/<glue_task>).
    data.source = "files"
    data.glue_task = ""
    data.tfds_data_dir = ""  # '' is the TFDS default
    data.eval_split = ""  # '' is the task's first eval split
    data.train_file = ""
    data.eval_file = ""
    # Column names: the first text, the second ('' for single texts), the label.
    data.text_a = "text_a"
    data.text_b = "text_b"
    data.label = "label"
    # A float label and one output trained with squared error.
    data.is_regression = False
    # () reads the label set from train_file (sorted).
    data.label_names = ()
    # () is accuracy (pearson, spearman for regression); also f1, matthews_corrcoef.
    data.metrics = ()
    data.max_seq_length = 128
    return data


def get_config() -> ml_collections.ConfigDict:
    config = base.get_config()
    config.task = "classification"
    config.data = get_data_config()
    return config
