"""The workdir: every file a run writes, named, read and written here.

    WORKDIR/
      config.json               the resolved experiment config
      model_config.json         the BertConfig (bert_config.json field names plus ours)
      vocab.txt | .json | .model
                                the vocabulary the run was trained with
      task.json                 what restore() and predict need: the task, its labels,
                                the tokenizer settings, the sequence length
      results.json              {"eval": the latest evaluation, "best": the best one}
      eval_predictions.jsonl    the final evaluation's predictions (SQuAD: predictions.json ...)
      metrics.jsonl, tensorboard/
      checkpoints/<step>/       orbax checkpoints of the train state (checkpoint.py)

Everything but the checkpoints is written by process 0 only, atomically
(data_pipeline.files), so a run killed at any moment leaves each file whole.
Nothing here imports the trainer: restore() and the converter read workdirs
through this module alone.
"""

import json
import os

import jax
import tensorflow as tf

from bertjax.model import SHAPE_FIELDS, BertConfig
from data_pipeline import files
from data_pipeline.errors import UserError

CONFIG_FILE = "config.json"
MODEL_CONFIG_FILE = "model_config.json"
TASK_FILE = "task.json"
RESULTS_FILE = "results.json"
EVAL_PREDICTIONS_FILE = "eval_predictions.jsonl"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINT_DIR = "checkpoints"
VOCAB_NAMES = ("vocab.txt", "vocab.json", "vocab.model")


class CheckpointError(UserError):
    """A workdir or checkpoint that does not fit this run."""


def checkpoint_dir(workdir: str) -> str:
    """The absolute folder of the orbax checkpoints (orbax wants absolute paths)."""
    return os.path.abspath(os.path.join(workdir, CHECKPOINT_DIR))


def read_json(file: str) -> dict | None:
    """A JSON file's object, or None if there is no such file; malformed JSON names the file."""
    if not tf.io.gfile.exists(file):
        return None
    with tf.io.gfile.GFile(file, "r") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{file}: not valid JSON ({error})") from None


def read_model_config(workdir: str) -> BertConfig | None:
    values = read_json(os.path.join(workdir, MODEL_CONFIG_FILE))
    return None if values is None else BertConfig.from_dict(values)


def require_model_config(workdir: str, *, what: str) -> BertConfig:
    """The saved model config, or an error saying `what` the workdir was expected to be."""
    config = read_model_config(workdir)
    if config is None:
        raise CheckpointError(f"{what}={workdir!r}: no {MODEL_CONFIG_FILE} there")
    return config


def check_same_shapes(saved: BertConfig, current: BertConfig, *, where: str) -> None:
    """Fails when a saved model's parameter shapes differ from this run's."""
    for name in SHAPE_FIELDS:
        if getattr(saved, name) != getattr(current, name):
            raise CheckpointError(
                f"{where}: the saved model has {name}={getattr(saved, name)}, this run "
                f"config.model.{name}={getattr(current, name)}"
            )


def vocab_file(workdir: str) -> str | None:
    """The vocabulary a run copied into its workdir, if any."""
    for name in VOCAB_NAMES:
        candidate = os.path.join(workdir, name)
        if tf.io.gfile.exists(candidate):
            return candidate
    return None


def require_vocab_file(workdir: str, *, what: str) -> str:
    found = vocab_file(workdir)
    if found is None:
        raise CheckpointError(f"{what}={workdir!r}: no vocabulary ({', '.join(VOCAB_NAMES)}) there")
    return found


def read_task(workdir: str) -> dict | None:
    """task.json: {"kind", "max_seq_length", "tokenizer_data", ...}; None before fine-tuning
    workdirs wrote one for every task (and for `bertjax.convert import` output)."""
    return read_json(os.path.join(workdir, TASK_FILE))


def read_tokenizer_data(workdir: str) -> dict:
    """The pretraining data config whose tokenizer settings the workdir's vocabulary goes with."""
    task = read_task(workdir)
    if task is not None:
        return task["tokenizer_data"]
    config = read_json(os.path.join(workdir, CONFIG_FILE))
    if config is None:
        raise CheckpointError(f"{workdir}: no {CONFIG_FILE} or {TASK_FILE}")
    return config["data"]


def read_results(workdir: str) -> dict:
    return read_json(os.path.join(workdir, RESULTS_FILE)) or {}


def write_results(workdir: str, results: dict) -> None:
    if jax.process_index() == 0:
        files.atomic_write_json(os.path.join(workdir, RESULTS_FILE), results)


def write_lines(file: str, records) -> None:
    """One JSON object per line, written atomically."""
    files.atomic_write(file, "".join(json.dumps(record) + "\n" for record in records))


def write_run_description(
    workdir: str, config, model_config: BertConfig, vocab: str, task: dict
) -> str:
    """Writes config, model config, vocabulary and task.json; returns the workdir vocab path."""
    if jax.process_index() != 0:
        return vocab
    target = os.path.join(workdir, "vocab" + os.path.splitext(vocab)[1])
    tf.io.gfile.makedirs(workdir)
    files.atomic_write_json(
        os.path.join(workdir, CONFIG_FILE), json.loads(config.to_json_best_effort())
    )
    files.atomic_write_json(os.path.join(workdir, MODEL_CONFIG_FILE), model_config.to_dict())
    files.atomic_write_json(os.path.join(workdir, TASK_FILE), task)
    if os.path.abspath(vocab) != os.path.abspath(target):
        files.atomic_copy(vocab, target)
    return target
