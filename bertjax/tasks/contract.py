"""The task contract: what the training loop, restore() and predict need of a task.

A task is a `Task` of plain functions, built once in its own module
(`bertjax/tasks/pretraining.py`, `classification.py`, `tagging.py`, `squad.py`) and
listed in `bertjax.tasks.TASKS` under the name `config.task` gives it.

    task.setup(config, workdir) -> Setup   checks the config and reads the data
                                           for one run; compiles nothing
    task.check_config(config)              checks every option it can without
                                           reading data (a sweep checks its
                                           trials with it before any starts)
    task.make_model(model_config, description) -> nn.Module
                                           the model of a workdir, from the
                                           description its run wrote to task.json
    task.predict_file(restored, input, output, batch_size) -> output
                                           predictions for a file of new examples
    task.report(workdir, config, results, out=..., fill_mask_examples=...)
                                           what a person reads at the end of a run

The training loop (train.py) owns everything else, once for every task:
resume, the checkpoint and evaluation cadence, the finite check, metrics,
results.json and the progress display.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import tensorflow as tf
from flax import linen as nn

from bertjax.model import BertConfig
from bertjax.tasks import scores
from data_pipeline.config import ConfigError, check_known_keys, key_paths

# (batch_size, process_index, process_count, seed[, position]) -> this host's batches.
DatasetFn = Callable[..., tf.data.Dataset]


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """One run of a task: its model, data, loss and evaluation, checked and ready to compile."""

    model_config: BertConfig
    model: nn.Module
    vocab_file: str  # the vocabulary the inputs were tokenized with
    description: dict  # task.json: {"kind", "max_seq_length", "tokenizer_data", ...}
    num_train_steps: int
    optimizer: Any  # an optimizer config (optim.from_config) for num_train_steps
    eval_every_steps: int  # evaluate every N steps and after the last; 0: never
    num_eval_steps: int  # eval batches read per evaluation; 0: the whole split
    checkpoint_at_eval: bool  # also checkpoint at every evaluation (fine-tuning's epochs)

    # The model's inputs, in the order model.apply takes them, with their
    # lengths for init: {"input_ids": max_seq_length, ...}.
    model_inputs: dict[str, int]
    train_features: tuple[str, ...]  # the columns of a train batch the loss reads
    # sums(outputs, batch) -> {name: sum}: the loss and metric sums of a (micro)batch;
    # denominators(batch) -> the counts the loss divides by, of the whole batch;
    # loss(sums, denominators) -> the scalar that is differentiated.
    sums: Callable[[Any, dict], dict[str, jax.Array]]
    denominators: Callable[[dict], Any]
    loss: Callable[[dict, Any], jax.Array]
    summarize: Callable[[dict], dict[str, float]]  # sums -> means; has "loss"
    console: tuple[tuple[str, str], ...]  # (metric, short label) shown on train lines

    # Streams from step 0, or with `position=` (a `stream_position` row of its own
    # batches, which the loop saves in checkpoints) from right after that row.
    # A stream without `stream_position` is replayed to the step on a resume.
    train_dataset: DatasetFn
    eval_dataset: DatasetFn  # one pass over the held-out split
    # eval_outputs(outputs, batch): what an eval step keeps of a batch (traced);
    # score(list of host copies, one per batch) -> ({metric: value}, predictions).
    eval_outputs: Callable[[Any, dict], Any]
    score: Callable[[list], tuple[dict[str, float], Any]]
    best_metric: scores.Metric  # the one results.json's "best" follows
    write_predictions: Callable[[Any, str], None] | None = None  # (predictions, workdir)

    data: Any = None  # the task's loaded data or data config, for tests and tools

    # Parameters taken from another workdir's checkpoint: the top-level names
    # of the params tree (empty: none), and that checkpoint's layer layout.
    init_checkpoint: str = ""
    init_keys: tuple[str, ...] = ()
    init_scan_layers: bool = False


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    setup: Callable[[Any, str], Setup]  # (config, workdir) -> Setup
    make_model: Callable[[BertConfig, dict], nn.Module]  # (model config, task.json) -> model
    # (restored, input path, output path or "", batch size) -> where predictions went
    predict_file: Callable[..., str] | None = None
    # (workdir, config, results, *, out, fill_mask_examples): lines for a person at the end
    report: Callable[..., None] | None = None
    # (config) -> None: raises ConfigError for a bad option, reading no data; None: setup checks
    check_config: Callable[[Any], None] | None = None


# The top-level config keys the training loop reads, in every task's configs.
LOOP_KEYS = (
    "task",
    "seed",
    "train_batch_size",
    "eval_batch_size",
    "checkpoint_every_steps",
    "checkpoints_to_keep",
    "log_every_steps",
    "preemption_save_seconds",
    "platform",
    "compilation_cache_dir",
    "init_checkpoint",
    "mesh",
    "model",
    "data",
    "optimizer",
)


# What config.platform may say: a jax platform name, or any.
PLATFORMS = ("tpu", "gpu", "cpu", "any")


def check_keys(config, task_keys, *, optional=(), positive=()) -> None:
    """Exactly LOOP_KEYS plus `task_keys` at the top level (`optional` may be absent), each
    of `positive` at least 1; batch sizes and log_every_steps always."""
    keys = LOOP_KEYS + tuple(task_keys)
    positive = ("train_batch_size", "eval_batch_size", "log_every_steps", *positive)
    check_known_keys(config.keys(), keys, "config", elsewhere=key_paths(config, "config"))
    missing = sorted(set(keys) - set(optional) - set(config.keys()))
    if missing:
        raise ConfigError(f"missing config key: config.{missing[0]}")
    for key in positive:
        if config[key] < 1:
            raise ConfigError(f"config.{key}={config[key]}: must be at least 1")
    if not config.preemption_save_seconds > 0:
        raise ConfigError(
            f"config.preemption_save_seconds={config.preemption_save_seconds}: must be above 0"
        )
    if config.platform not in PLATFORMS:
        raise ConfigError(
            f"config.platform={config.platform!r}: must be one of {', '.join(PLATFORMS)}"
        )
    for path, value in _leaves(config.to_dict(), "config"):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}={value}: must be a finite number")


def _leaves(values: dict, prefix: str):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value


def host_share(config, batch_size_key: str) -> dict:
    """The keyword arguments of a DatasetFn for this host: its share of a global batch size."""
    return {
        "batch_size": config[batch_size_key] // jax.process_count(),
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "seed": config.seed,
    }


def apply_model(model: nn.Module, params, batch: dict, names, **kwargs):
    """`model.apply` on the batch's columns named in `names`, in that order."""
    return model.apply({"params": params}, *(batch[name] for name in names), **kwargs)


def weighted_mean_loss(sums: dict, denominators) -> jax.Array:
    """A fine-tuning loss: the batch's loss sum over its total weight."""
    return sums["loss_sum"] / jnp.maximum(denominators, 1.0)
