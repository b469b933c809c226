r"""What the fine-tuning tasks share: one output layer on a pretrained BertModel, all trained.

    python -m bertjax.main --config experiments/finetune/glue.py:mrpc --workdir DIR \
        --config.init_checkpoint=PRETRAINED_OR_CONVERTED_WORKDIR

The init checkpoint brings the architecture, the parameters of `bert/`, the
vocabulary and the tokenizer settings; the head starts from the usual init
(paper section 4). A task module (classification.py, tagging.py, squad.py)
reads its data and hands `make_setup` its head, loss sums, datasets and
scores; the run goes through the one training loop (train.py), which
evaluates with the task's official metrics after every epoch and at the end.
"""

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from bertjax import flops, losses, optim
from bertjax import model as model_lib
from bertjax import workdir as workdir_lib
from bertjax.model import PARAMETER_FIELDS, BertConfig
from bertjax.sharding import BATCH_AXES
from bertjax.tasks.contract import (
    Data,
    Description,
    Evaluation,
    HFClass,
    Initialization,
    Model,
    Objective,
    Setup,
    check_keys,
    host_share,
    weighted_mean_loss,
)
from data_pipeline import config as data_config_lib
from data_pipeline import files
from data_pipeline.errors import ConfigError, UserError
from data_pipeline.finetune import records
from data_pipeline.tokenizer import make_tokenizer
from data_pipeline.vocab import load_vocab, write_placeholder_vocab

# The keys of a fine-tuning config besides the loop's (task.LOOP_KEYS).
CONFIG_KEYS = ("num_train_epochs", "random_init")
# The BertConfig fields a fine-tuning run may change; the rest are the checkpoint's.
MODEL_OVERRIDES = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dtype",
    "scan_layers",
    "remat_policy",
    "attention_implementation",
)
# The inputs of every fine-tuning head, in the order it takes them; a head that reads
# one output per example of a packed row also takes where each starts.
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
PACKED_INPUT = "cls_positions"
PACKED_SLOT = "example_slot"  # where each example of a packed batch went (not a model input)


def check_config(config, task_keys: tuple[str, ...] = ()) -> None:
    """The keys and options every fine-tuning config has (and a task's own `task_keys`)."""
    check_keys(config, CONFIG_KEYS + task_keys)
    if not config.num_train_epochs > 0:
        raise ConfigError(f"config.num_train_epochs={config.num_train_epochs}: must be above 0")
    if not config.init_checkpoint:
        raise ConfigError(
            "config.init_checkpoint: fine-tuning needs a pretraining or converted workdir "
            "(its architecture, vocabulary and, unless config.random_init, its parameters)"
        )
    if names_pretraining_config(config.init_checkpoint):
        raise ConfigError(
            f"config.init_checkpoint={config.init_checkpoint!r}: a pretraining config stands "
            "for its run only in bertjax.tpu.aot; fine-tune from the workdir that run wrote"
        )
    unknown_model = sorted(set(config.model.keys()) - set(MODEL_OVERRIDES))
    if unknown_model:
        shape = " (a shape of the checkpoint's)" if unknown_model[0] in PARAMETER_FIELDS else ""
        raise ConfigError(
            f"config.model.{unknown_model[0]}: not changeable when fine-tuning{shape}; "
            f"use one of {', '.join(MODEL_OVERRIDES)}"
        )


def config_checker(data_from_config, task_keys: tuple[str, ...] = ()):
    """A fine-tuning task's check_config: its keys, its data options (`data_from_config`,
    which reads no data) and the init checkpoint's architecture."""

    def check(config) -> None:
        check_config(config, task_keys)
        optim.from_config(optimizer_values(config, num_train_steps=1))
        data_from_config(config.data)
        workdir_lib.require_model_config(config.init_checkpoint, what="config.init_checkpoint")

    return check


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """What a fine-tuning run takes from its init checkpoint besides the parameters."""

    model_config: BertConfig  # with this run's overrides (dropout, dtype, layout)
    vocab_file: str
    tokenizer_data: dict  # the pretraining data config its tokenizer follows
    tokenizer: Any
    scan_layers: bool  # the checkpoint's own layer layout
    # Pretrained with masked LM alone: no pooler, which fine-tuning then starts fresh
    # (as RoBERTa's and ModernBERT's classifiers do).
    without_pooler: bool


def load_pretrained(config, workdir: str, task_keys: tuple[str, ...] = ()) -> Pretrained:
    """Checks the config and reads the init checkpoint's architecture, vocabulary and tokenizer."""
    check_config(config, task_keys)
    init = config.init_checkpoint
    saved = workdir_lib.require_model_config(init, what="config.init_checkpoint")
    overrides = {k: v for k, v in config.model.to_dict().items() if v is not None}
    # The attention kernel is a run's choice, not the checkpoint's: XLA's unless set.
    model_config = dataclasses.replace(saved, **{"attention_implementation": "xla", **overrides})
    vocab_file = workdir_lib.require_vocab_file(init, what="config.init_checkpoint")
    _check_same_vocab(workdir, vocab_file)
    vocab_size = len(load_vocab(vocab_file))
    if vocab_size != model_config.vocab_size:
        raise ConfigError(
            f"config.init_checkpoint={init!r}: its vocabulary {vocab_file} has {vocab_size} "
            f"entries but its model has vocab_size={model_config.vocab_size}"
        )
    length = config.data.max_seq_length
    if length > model_config.max_position_embeddings:
        raise ConfigError(
            f"config.data.max_seq_length={length} is above the checkpoint's "
            f"max_position_embeddings={model_config.max_position_embeddings}"
        )
    tokenizer_data = workdir_lib.read_tokenizer_data(init)
    return Pretrained(
        model_config=model_config,
        vocab_file=vocab_file,
        tokenizer_data=tokenizer_data,
        tokenizer=make_tokenizer(data_config_lib.from_config(tokenizer_data), vocab_file),
        scan_layers=saved.scan_layers,
        without_pooler=(
            workdir_lib.read_task(init)[0] == "pretraining"
            and not tokenizer_data["next_sentence_prediction"]
        ),
    )


def names_pretraining_config(init_checkpoint: str) -> bool:
    """Whether `init_checkpoint` is an experiment config, FILE.py[:ARG], not a workdir."""
    return init_checkpoint.split(":")[0].endswith(".py")


def without_checkpoint(config, workdir: str):
    """Task.without_data of a fine-tuning config whose init checkpoint does not exist yet:
    `config.init_checkpoint=FILE.py[:ARG]`, the pretraining config that will write it,
    becomes a placeholder of that run in WORKDIR/pretrained (its model config, task.json
    and a WordPiece vocabulary of its size). The model builds and compiles ahead of time;
    the placeholder has no parameters, so it trains nothing. Any other config is returned
    as it is."""
    config = config.copy_and_resolve_references()
    if not names_pretraining_config(config.init_checkpoint):
        return config
    folder = placeholder_of(config.init_checkpoint, os.path.join(workdir, "pretrained"))
    with config.unlocked():
        config.init_checkpoint = folder
    return config


def placeholder_of(pretraining_config: str, folder: str) -> str:
    """Writes in `folder` what a workdir of the run of `pretraining_config` (FILE.py[:ARG])
    would hold but its parameters: its model config, task.json and a WordPiece
    vocabulary of its size. Returns `folder`."""
    pretraining = data_config_lib.read_config_file(pretraining_config)
    model_config = model_lib.from_config(pretraining.model)
    vocab = os.path.join(folder, "vocab.txt")
    tokenizer_data = {**pretraining.data.to_dict(), "tokenizer": "wordpiece", "vocab_file": vocab}
    description = {"max_seq_length": pretraining.data.max_seq_length}
    files.atomic_write_json(
        os.path.join(folder, workdir_lib.MODEL_CONFIG_FILE), model_config.to_dict()
    )
    files.atomic_write_json(
        os.path.join(folder, workdir_lib.TASK_FILE),
        {"kind": "pretraining", **description, "tokenizer_data": tokenizer_data},
    )
    write_placeholder_vocab(vocab, model_config.vocab_size)
    return folder


def _check_same_vocab(workdir: str, vocab_file: str) -> None:
    """A resumed workdir must have been tokenized with the init checkpoint's vocabulary."""
    existing = workdir_lib.vocab_file(workdir)
    if existing is None:
        return
    if load_vocab(existing).tokens != load_vocab(vocab_file).tokens:
        raise workdir_lib.CheckpointError(
            f"workdir {workdir}: its vocabulary {existing} differs from config.init_checkpoint's "
            f"{vocab_file}; use a new workdir for another checkpoint"
        )


def optimizer_values(config, num_train_steps: int) -> dict:
    """config.optimizer with warmup_proportion turned into warmup_steps for this run's length."""
    values = config.optimizer.to_dict()
    proportion = values.pop("warmup_proportion")
    if not 0.0 <= proportion <= 1.0:
        raise ConfigError(f"config.optimizer.warmup_proportion={proportion}: must be in [0, 1]")
    return {**values, "warmup_steps": int(num_train_steps * proportion)}


class PackedShapes:
    """The packed shape of each split's batches, planned once per (split, batch) and kept:
    `plan(*, split, batch_size, process_count, seed, num_epochs, rows_multiple)` packs the
    split's whole plan of batches (data_pipeline/packing.py)."""

    def __init__(self, plan: Callable, num_microbatches: int):
        self._plan, self._num_microbatches = plan, num_microbatches
        self._shapes = {}

    def __call__(self, split: str, *, batch_size: int, process_count: int, seed: int, num_epochs):
        key = (split, batch_size, process_count, seed, num_epochs)
        if key not in self._shapes:
            microbatches = self._num_microbatches if split == "train" else 1
            multiple = math.gcd(batch_size // microbatches, batch_shards()) * microbatches
            self._shapes[key] = self._plan(
                split=split,
                batch_size=batch_size,
                process_count=process_count,
                seed=seed,
                num_epochs=num_epochs,
                rows_multiple=multiple,
            )
        return self._shapes[key]

    def for_dataset(self, split: str, dataset_kwargs: dict):
        """The shape for a task dataset's arguments (batch_size, process_count, seed,
        num_epochs among them)."""
        names = ("batch_size", "process_count", "seed", "num_epochs")
        return self(split, **{name: dataset_kwargs[name] for name in names})


def batch_shards() -> int:
    """The pieces a host's batch is split into: by the mesh of the run being built
    (train.build_run sets it), else by this host's devices."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return jax.local_device_count()
    return max(1, math.prod(mesh.shape[axis] for axis in BATCH_AXES) // jax.process_count())


def example_weight(batch):
    return jnp.sum(batch["example_weight"].astype(jnp.float32))


@dataclasses.dataclass(frozen=True, eq=False)
class Head:
    """What a fine-tuning task hands `make_setup`: its output layer, labels, loss and scores.

    `score(outputs, passed)` scores the model's outputs over the whole eval split,
    `passed` the eval batches' other columns. A head with one output per token
    needs no PACKED_INPUT; its packed eval batches are unpacked all the same, a
    per-token column taking `token_padding[name]` (else 0) past its example's tokens.
    """

    model: nn.Module
    num_labels: int
    label_names: tuple[str, ...]
    metric_names: tuple[str, ...]
    label_features: tuple[str, ...]  # the batch columns its loss reads
    sums: Callable
    weight: Callable  # batch -> the total weight the loss divides by
    score: Callable[[Any, dict], tuple[dict, Any]]
    write_predictions: Callable[[Any, str], None]
    token_padding: dict[str, Any] | None = None


def make_setup(
    config,
    pretrained: Pretrained,
    head: Head,
    make_dataset: Callable,
    packed_slots: Callable[[], int] | None = None,
) -> Setup:
    """The Setup of a fine-tuning run: `num_train_epochs` over the training split, an
    evaluation (and a checkpoint) after every epoch, the loss a weighted mean.

    `make_dataset(split, *, batch_size, process_index, process_count, seed, num_epochs)`
    gives (dataset, number of batches). `packed_slots`: the batches are packed and the
    model takes PACKED_INPUT too; it gives the examples a row may hold (for init), once
    the training split is checked.
    """
    num_train_steps = train_steps(config, make_dataset)
    length = config.data.max_seq_length
    slots = packed_slots() if packed_slots else 0
    packed = (PACKED_INPUT,) if slots else ()
    return Setup(
        model=Model(
            pretrained.model_config,
            head.model,
            {**dict.fromkeys(MODEL_INPUTS, length), **dict.fromkeys(packed, slots)},
        ),
        objective=Objective(
            num_train_steps=num_train_steps,
            optimizer=optimizer_values(config, num_train_steps),
            features=(*MODEL_INPUTS, *packed, "example_weight", *head.label_features),
            sums=head.sums,
            denominators=head.weight,
            loss=weighted_mean_loss,
            summarize=losses.summarize_finetune,
            console=(("accuracy", "acc"),),
        ),
        data=Data(
            vocab_file=pretrained.vocab_file,
            train=functools.partial(dataset, make_dataset, "train", config.num_train_epochs),
            eval=functools.partial(dataset, make_dataset, "eval", 1),
            position_fields=records.POSITION_FIELDS,
            # source='files' (tfds and GLUE's folder: fixed releases)
            train_files=lambda: (config.data.train_file,) if config.data.get("train_file") else (),
        ),
        evaluation=Evaluation(
            every_steps=max(1, round(num_train_steps / config.num_train_epochs)),
            num_steps=0,
            checkpoint_each=True,
            outputs=functools.partial(_outputs_and_bookkeeping, token_padding=head.token_padding),
            score=functools.partial(_score_stacked, head.score),
            write_predictions=head.write_predictions,
        ),
        description=Description(
            max_seq_length=length,
            tokenizer_data=pretrained.tokenizer_data,
            num_labels=head.num_labels,
            label_names=tuple(head.label_names),
            metrics=tuple(head.metric_names),
            data=config.data.to_dict(),
            init_checkpoint=config.init_checkpoint,
        ),
        init=Initialization(
            checkpoint=config.init_checkpoint,
            keys=() if config.random_init else ("bert",),
            scan_layers=pretrained.scan_layers,
            fresh=("bert/pooler",) if pretrained.without_pooler else (),
        ),
    )


def train_steps(config, make_dataset) -> int:
    """The training split's batches over num_train_epochs; a split too small for one batch
    is an error naming the options."""
    host = host_share(config, "train_batch_size")
    try:
        _, num_train_steps = make_dataset("train", num_epochs=config.num_train_epochs, **host)
    except UserError:
        raise
    except ValueError as error:
        raise ConfigError(
            f"config.num_train_epochs={config.num_train_epochs}, "
            f"config.train_batch_size={config.train_batch_size}: {error}"
        ) from error
    return num_train_steps


def _score_stacked(score, outputs: list):
    """`score` of the eval batches' outputs, concatenated."""
    stacked = jax.tree.map(lambda *xs: np.concatenate(xs), *outputs)
    return score(*stacked)


def forward_flops_pooled(c, inputs: dict[str, int], description: Description) -> float:
    """The encoder, then the pooler and a classifier at each example's [CLS] (one, or one per
    packed example slot)."""
    pooled = inputs.get(PACKED_INPUT, 1)
    head = pooled * (flops.pooler_flops(c) + 2 * c.hidden_size * description.num_labels)
    return flops.encoder_flops(c, inputs["input_ids"]) + head


def forward_flops_per_token(c, inputs: dict[str, int], description: Description) -> float:
    """The encoder, then a classifier of num_labels outputs at every position."""
    length = inputs["input_ids"]
    return flops.encoder_flops(c, length) + length * 2 * c.hidden_size * description.num_labels


def hf_classes(
    classes: dict[str, HFClass], config: Callable[[Description], dict] = lambda description: {}
):
    """Task.hf_class of a fine-tuning task: its transformers class in each model family,
    with config.json's head fields `config(description)`."""

    def hf_class(family: str, description: Description) -> HFClass:
        return dataclasses.replace(classes[family], config=config(description))

    return hf_class


def hf_labels(description: Description) -> dict:
    """config.json's labels of a head with one output per label: their number and names
    (transformers' LABEL_i when the run had none)."""
    names = description.label_names or tuple(f"LABEL_{i}" for i in range(description.num_labels))
    return {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {name: i for i, name in enumerate(names)},
    }


def dataset(make_dataset, split: str, num_epochs: int, position=None, **host):
    """A DatasetFn of `make_dataset`'s split."""
    return make_dataset(split, num_epochs=num_epochs, position=position, **host)[0]


def _outputs_and_bookkeeping(outputs, batch, token_padding=None):
    """The model's outputs with the batch's other columns (example ids, weights) passed
    through; of a packed batch, in the batch's example order, taken out of their slots
    (per-example values [R, K, ...]) or out of their rows (per-token values [R, L, ...]:
    each example's own tokens from its first on, as unpacked, then `token_padding[name]`,
    else 0)."""
    inputs = (*MODEL_INPUTS, PACKED_INPUT)
    if PACKED_INPUT in batch:
        tokens = batch["input_ids"].shape
        slots = batch[PACKED_INPUT].shape
        where = batch[PACKED_SLOT]
        row, slot = where // slots[1], where % slots[1]
        start = batch[PACKED_INPUT][row, slot]
        size = jnp.sum(batch["input_mask"][row] == slot[:, None] + 1, axis=1)
        position = jnp.arange(tokens[1])
        index = jnp.minimum(start[:, None] + position, tokens[1] - 1)
        inside = position < size[:, None]

        def unpack(x, blank=0):
            # K < L (an example has [CLS] and [SEP] at least), so the shape tells which.
            if x.shape[:2] == slots:
                return x.reshape(-1, *x.shape[2:])[where]
            keep = inside.reshape(*inside.shape, *[1] * (x.ndim - 2))
            return jnp.where(keep, x[row[:, None], index], jnp.asarray(blank, x.dtype))

        outputs = jax.tree.map(unpack, outputs)
        token_padding = token_padding or {}
        batch = {
            k: unpack(v, token_padding.get(k, 0))
            for k, v in batch.items()
            if k not in inputs and v.shape[:2] in (slots, tokens)
        }
    return outputs, {k: v for k, v in batch.items() if k not in inputs}


def report(workdir: str, config, results: dict, *, out, fill_mask_examples: int = 0) -> None:
    """The end of a run, for a person: the final and best evaluations."""
    del workdir, config, fill_mask_examples  # the scores say it all
    for name in ("eval", "best"):
        values = results.get(name)
        if values:
            shown = "  ".join(f"{k} {v:.4f}" for k, v in values.items() if k != "step")
            print(
                f"{'final' if name == 'eval' else 'best '} (step {values['step']}): {shown}",
                file=out,
            )
