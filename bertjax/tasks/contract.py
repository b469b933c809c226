"""The task contract: what the training loop, the tools, restore() and predict need of a task.

A task is a `Task` of plain functions, built once in its own module
(`bertjax/tasks/pretraining.py`, `classification.py`, `tagging.py`, `squad.py`) and
found by `bertjax.tasks.for_config(config)` under the name `config.task` gives it.
Everything that differs between tasks is here; nothing outside bertjax/tasks/
reads `config.task` or compares a task's name.

    task.setup(config, workdir) -> Setup   checks the config and reads the data
                                           for one run; compiles nothing
    task.check_config(config)              checks every option it can without
                                           reading data (a sweep checks its
                                           trials with it before any starts)
    task.check_hosts(config, hosts)        what a run on that many hosts cannot
                                           take (the launcher checks it before
                                           it starts a TPU slice)
    task.best_metric(config) -> Metric     what results.json's "best" and a
                                           sweep rank runs by, from the config alone
    task.forward_flops(model config, model inputs, description) -> FLOPs
                                           of one row's forward pass, head included
    task.batch_shapes(setup, split, batch_size) -> {name: (shape, dtype)}
                                           a global batch, for compiling ahead of time
    task.without_data(config, workdir) -> config
                                           a config that builds without the run's
                                           data (compiling ahead of time, benchmarks)
    task.make_model(model_config, description) -> nn.Module
                                           the model of a workdir, from the
                                           description its run wrote to task.json
    task.predict_file(restored, input, output, batch_size) -> output
                                           predictions for a file of new examples
    task.report(restored, config, results, out=..., fill_mask_examples=...)
                                           what a person reads at the end of a run
                                           (restored: its workdir's inference.restore)
    task.hf_class(family, description) -> HFClass
                                           the Hugging Face transformers class a
                                           workdir's model exports as
                                           (python -m bertjax.convert export)
    task.serving(restored) -> Serving      what a SavedModel of the workdir takes
                                           and returns (--format savedmodel)
    task.reranks                           its workdirs score (query, passage) pairs
                                           (a reranker: bertjax.rerank)

The training loop (train.py) owns everything else, once for every task:
resume, the checkpoint and evaluation cadence, the finite check, metrics,
results.json and the progress display.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from flax import linen as nn

from bertjax import hooks, profiling
from bertjax.model import BertConfig
from bertjax.tasks import scores
from bertjax.workdir import CheckpointError
from data_pipeline.config import check_known_keys, key_paths
from data_pipeline.errors import ConfigError

# (batch_size, process_index, process_count, seed[, position]) -> this host's batches.
DatasetFn = Callable[..., tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class Description:
    """task.json besides the task's name: what restore() and predict need to rebuild the
    model of a workdir and read new inputs as the run read its own."""

    max_seq_length: int
    tokenizer_data: dict  # the pretraining data config whose tokenizer the vocabulary follows
    num_labels: int = 0
    label_names: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    data: dict | None = None  # a fine-tuning run's config.data
    init_checkpoint: str = ""
    # How the workdir embeds a text (bertjax/embedding.py's Pooling); None: its defaults.
    embedding: dict | None = None

    def to_json(self) -> dict:
        values = dataclasses.asdict(self)
        return {**values, "label_names": list(self.label_names), "metrics": list(self.metrics)}

    @classmethod
    def from_json(cls, values: dict, where: str) -> "Description":
        """From task.json's fields; an unknown or missing one names `where`."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise CheckpointError(f"{where}: unknown field {unknown[0]!r}")
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        missing = [name for name in required if name not in values]
        if missing:
            raise CheckpointError(f"{where}: missing field {missing[0]!r}")
        tuples = {k: tuple(values[k]) for k in ("label_names", "metrics") if k in values}
        return cls(**{**values, **tuples})


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    config: BertConfig
    module: nn.Module
    # The model's inputs, in the order module.apply takes them, with their
    # lengths for init: {"input_ids": max_seq_length, ...}.
    inputs: dict[str, int]
    # Those of them that hold token ids: a row's tokens are their lengths' sum.
    token_inputs: tuple[str, ...] = ("input_ids",)


@dataclasses.dataclass(frozen=True, eq=False)
class Objective:
    """What one training step computes, and for how many steps."""

    num_train_steps: int
    optimizer: Mapping[str, Any]  # the options of optim.OptimizerConfig, for num_train_steps
    features: tuple[str, ...]  # the columns of a train batch the loss reads
    # sums(outputs, batch) -> {name: sum}: the loss and metric sums of a (micro)batch;
    # denominators(batch) -> the counts the loss divides by, of the whole batch;
    # loss(sums, denominators) -> the scalar that is differentiated.
    sums: Callable[[Any, dict], dict[str, jax.Array]]
    denominators: Callable[[dict], Any]
    loss: Callable[[dict, Any], jax.Array]
    summarize: Callable[[dict], dict[str, float]]  # sums -> means; has "loss"
    console: tuple[tuple[str, str], ...]  # (metric, short label) shown on train lines
    # The loss reads the whole batch's outputs together (in-batch negatives), so
    # microbatches are GradCache's (train.cached_gradients), not separate losses.
    whole_batch: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class Data:
    vocab_file: str  # the vocabulary the inputs were tokenized with
    # Streams from step 0, or with `position=` (a `stream_position` row of its own
    # batches, which the loop saves in checkpoints) from right after that row.
    # A stream without `stream_position` is replayed to the step on a resume. The
    # loop reads a run's input as the streams of its first start's process count
    # (data_pipeline/streams.py), so it resumes on any host count that divides or is
    # a multiple of that one.
    train: DatasetFn
    eval: DatasetFn  # one pass over the held-out split
    # What a `stream_position` row of `train` counts, by name (the source's, e.g.
    # pretraining_input.POSITION_FIELDS); checkpoints keep the names with the positions,
    # so a resume refuses positions that count something else. Empty: no positions.
    position_fields: tuple[str, ...] = ()
    # The files `train` reads, globs resolved, in its order: checkpoints keep their count
    # and a digest of their paths and sizes with the positions (streams.files_read), so a
    # resume refuses positions into files that changed. Called as the train streams start,
    # not by setup: a run compiled ahead of time may name files that do not exist yet.
    # () for a source of no files.
    train_files: Callable[[], Sequence[str]] = tuple


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluation:
    every_steps: int  # evaluate every N steps and after the last; 0: never
    num_steps: int  # eval batches read per evaluation; 0: the whole split
    checkpoint_each: bool  # also checkpoint at every evaluation (fine-tuning's epochs)
    # outputs(outputs, batch): what an eval step keeps of a batch (traced);
    # score(list of host copies, one per batch) -> ({metric: value}, predictions).
    outputs: Callable[[Any, dict], Any]
    score: Callable[[list], tuple[dict[str, float], Any]]
    write_predictions: Callable[[Any, str], None] | None = None  # (predictions, workdir)


@dataclasses.dataclass(frozen=True)
class Initialization:
    """Parameters taken from another workdir's checkpoint: the top-level names of the
    params tree (empty: none), and that checkpoint's layer layout."""

    checkpoint: str = ""
    keys: tuple[str, ...] = ()
    scan_layers: bool = False
    # Modules under `keys` the checkpoint lacks, which keep this run's initialization:
    # `bert/pooler` of a model pretrained with masked LM alone.
    fresh: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Teacher:
    """A model whose outputs the loss reads beside the student's (distillation,
    docs/distillation.md): its workdir's checkpoint, restored once and sharded by its
    logical axis names like the student's parameters, and applied to the same inputs
    (Model.inputs) in the same jitted step, deterministically and without a gradient. Its
    outputs reach `Objective.sums` as the batch's "teacher" column; a batch that already
    has one (outputs computed earlier and stored with the data) is not given another."""

    module: nn.Module  # in its checkpoint's layer layout
    workdir: str


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """One run of a task: its model, objective, data and evaluation, checked and ready to
    compile, and what its workdir's task.json says."""

    model: Model
    objective: Objective
    data: Data
    evaluation: Evaluation
    description: Description
    init: Initialization = Initialization()
    teacher: Teacher | None = None
    # A teacher's outputs stored with the data (teacher_cache.py's TeacherCache), which the
    # training loop computes once when missing; the batches then carry them, and `teacher`
    # is None.
    teacher_cache: Any = None


@dataclasses.dataclass(frozen=True)
class HFClass:
    """The Hugging Face transformers class a workdir's model exports as, in its model's
    family: BERT's blocks ("bert") or ModernBERT's ("modernbert"), as
    bertjax/convert/config_json.py's hf_family tells them apart."""

    name: str  # "BertForTokenClassification"
    # Our head's Dense modules -> the Linear of the class each becomes, {"qa_outputs":
    # "classifier"}; None: the family's pretraining class, whose heads the rename table
    # (bertjax/convert/param_names.py) holds.
    head: Mapping[str, str] | None = None
    # Whether the class holds our pooler (BERT's pooler, ModernBERT's `head`); ours is
    # computed unused, and not exported, where it does not.
    pooler: bool = True
    # config.json's fields of the head: num_labels, id2label, problem_type, ...
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The family's bare encoder (BertModel, ModernBertModel; `head` {}), which names its
    # tensors without the prefix ("bert.", "model.") the classes with heads add: what a
    # sentence-transformers export holds, whatever the workdir's task.
    bare: bool = False


@dataclasses.dataclass(frozen=True)
class Serving:
    """What a SavedModel of a task's workdir serves (bertjax/convert/savedmodel.py): text
    in through the tokenizer, in the graph; the task's answers out."""

    # serving_default's tf.string [B] inputs: ("text",), ("text", "text_pair"), ...
    texts: tuple[str, ...]
    # TensorFlow, in the graph: {text input: tf.string [B]} -> features: every model
    # input (int32, sequences `length` long) and whatever else postprocess reads
    preprocess: Callable[[dict], dict]
    # The model's int32 inputs and their shapes as jax2tf's polymorphic shapes, "(b, l)":
    # a letter, a dimension the request decides, `l` the sequence length (at most the
    # model's positions; serving_default cuts it to the batch's bucket); a number, a
    # fixed one. The second signature's inputs, and forward's.
    inputs: Mapping[str, str]
    length: int  # tokens a text is cut to
    # JAX: (params, {model input: array}) -> the model's outputs (jax2tf converts it)
    forward: Callable[[Any, dict], Any]
    # TensorFlow: (the model's outputs, preprocess's features, or None in the ids
    # signature) -> {output name: tensor [B, ...]}
    postprocess: Callable[[Any, dict | None], dict]


def _unchanged(config, workdir: str):
    del workdir
    return config


def _any_hosts(config, hosts: int) -> None:
    del config, hosts


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    setup: Callable[[Any, str], Setup]  # (config, workdir) -> Setup
    make_model: Callable[[BertConfig, Description], nn.Module]  # (model config, task.json)
    best_metric: Callable[[Any], scores.Metric]  # (config) -> the metric runs are ranked by
    # (model config, model inputs, description) -> FLOPs of one row's forward pass
    forward_flops: Callable[[BertConfig, dict[str, int], Description], float]
    # (setup, split, global batch size) -> {name: (shape, dtype)} of a global batch
    batch_shapes: Callable[[Setup, str, int], dict[str, tuple]]
    # (config) -> None: raises ConfigError for a bad option, reading no data
    check_config: Callable[[Any], None]
    # (config, workdir) -> a config that builds without the run's data
    without_data: Callable[[Any, str], Any] = _unchanged
    # (config, hosts) -> None: raises ConfigError for an option a run on `hosts` hosts
    # cannot take, from the count alone
    check_hosts: Callable[[Any, int], None] = _any_hosts
    # (restored, input path, output path or "", batch size) -> where predictions went
    predict_file: Callable[..., str] | None = None
    # (workdir, config, results, *, out, fill_mask_examples): lines for a person at the end
    report: Callable[..., None] | None = None
    # (model family, description) -> the transformers class the workdir's model exports
    # as; raises ValueError saying why a model has none in that family. None: the task's
    # workdirs do not export to Hugging Face.
    hf_class: Callable[[str, Description], HFClass] | None = None
    # (restored) -> Serving: what its SavedModel serves; None: no SavedModel export
    serving: Callable[[Any], Serving] | None = None
    # Its workdirs score (query, passage) pairs, a reranker's (bertjax.rerank): what
    # `retrieval evaluate --rerank` and `mine --scorer` take, and no embedder.
    reranks: bool = False


def dataset_batch_shapes(setup: Setup, split: str, batch_size: int) -> dict[str, tuple]:
    """Task.batch_shapes from the split's own dataset (built, not read): one host's
    batches of the whole global batch, as the run's mesh plans them."""
    make = setup.data.train if split == "train" else setup.data.eval
    element = make(batch_size=batch_size, process_index=0, process_count=1, seed=0)
    return {
        name: ((spec.shape[0] or batch_size, *spec.shape[1:]), np.dtype(spec.dtype.as_numpy_dtype))
        for name, spec in element.element_spec.items()
    }


def longest_batch_shapes(setup: Setup, split: str, batch_size: int) -> dict[str, tuple]:
    """Task.batch_shapes of a task whose input pads to length buckets: the split's batch
    shapes at the longest lengths, the model's (Model.inputs)."""
    shapes = dataset_batch_shapes(setup, split, batch_size)
    longest = setup.model.inputs
    return {
        name: ((shape[0], longest[name]) if name in longest else shape, dtype)
        for name, (shape, dtype) in shapes.items()
    }


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
    "profile",
    "input_wait_warning",
    "hooks",
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
    if not 0 <= config.input_wait_warning <= 1:
        raise ConfigError(
            f"config.input_wait_warning={config.input_wait_warning}: must be a fraction "
            "from 0 (never warn) to 1"
        )
    profiling.check(config.profile)
    hooks.from_config(config.hooks)
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
