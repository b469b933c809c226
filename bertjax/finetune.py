"""Fine-tuning: one output layer on a pretrained BertModel, everything trained, as the paper does.

    python -m bertjax.main --config experiments/finetune/glue.py:mrpc --workdir DIR \
        --config.init_checkpoint=PRETRAINED_OR_CONVERTED_WORKDIR

`config.task` names the kind of task; `config.data` is that kind's data config:

    classification  sentence (pair) classification or regression on the pooled
                    [CLS] output: GLUE from TFDS or local TSV/CSV/JSONL
                    (data_pipeline/classification.py)
    tagging         a label per word on the sequence output: CoNLL files or TFDS
                    (data_pipeline/tagging.py)
    squad           answer-span start/end logits on the sequence output: SQuAD
                    1.1/2.0 JSON or TFDS (data_pipeline/squad.py)

The init checkpoint brings the architecture, the parameters of `bert/`, the
vocabulary and the tokenizer settings; the head starts from the usual init.
Training runs `num_train_epochs` over the training split on the same mesh,
sharding, checkpointing and resume machinery as pretraining (train.py), and
evaluates with the task's official metrics after every epoch and at the end.

The workdir holds what pretraining's does (config.json, model_config.json, the
vocabulary, checkpoints/, metrics.jsonl, tensorboard/) plus task.json (the task
kind, label names and tokenizer settings that restore() and predict need) and
results.json ({"eval": final metrics, "best": best metrics and their step}).
"""

import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import linen as nn

from bertjax import checkpoint, losses, metrics, optim, scores, sharding, train
from bertjax.model import (
    SHAPE_FIELDS,
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    stack_layers,
    unstack_layers,
)
from data_pipeline import classification, squad, tagging
from data_pipeline import config as data_config_lib
from data_pipeline.tokenizer import make_tokenizer
from data_pipeline.vocab import load_vocab

TOP_LEVEL_KEYS = (
    "seed",
    "task",
    "num_train_epochs",
    "train_batch_size",
    "eval_batch_size",
    "checkpoint_every_steps",
    "checkpoints_to_keep",
    "log_every_steps",
    "init_checkpoint",
    "random_init",
    "mesh",
    "model",
    "data",
    "optimizer",
)
TASK_FILE = "task.json"
RESULTS_FILE = "results.json"
# The BertConfig fields a fine-tuning run may change; the rest are the checkpoint's.
MODEL_OVERRIDES = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dtype",
    "scan_layers",
    "remat_policy",
    "attention_implementation",
)


# ------------------------------------------------------------------------ the step


def finetune_step(state, batch, rng, *, model, tx, sums_fn, num_microbatches):
    """One optimizer step; the loss is the batch's weighted mean, as in train.train_step."""
    step_rng = jax.random.fold_in(rng, state.step)
    total_weight = jnp.maximum(sums_fn.weight(batch), 1.0)

    def loss_fn(params, microbatch, dropout_rng):
        outputs = model.apply(
            {"params": params},
            microbatch["input_ids"],
            microbatch["input_mask"],
            microbatch["segment_ids"],
            deterministic=False,
            rngs={"dropout": dropout_rng},
        )
        sums = sums_fn(outputs, microbatch)
        return sums["loss_sum"] / total_weight, sums

    grads, sums = train.accumulate_gradients(
        loss_fn, state.params, batch, step_rng, num_microbatches
    )
    return train.apply_gradients(state, grads, tx), sums


def predict_step(params, batch, *, model):
    """The model's outputs for a batch, with the batch's bookkeeping columns passed through."""
    outputs = model.apply(
        {"params": params},
        batch["input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        deterministic=True,
    )
    passed = {k: v for k, v in batch.items() if k not in ("input_ids", "input_mask", "segment_ids")}
    return outputs, passed


# ----------------------------------------------------------------------- task kinds


@dataclasses.dataclass(frozen=True)
class Sums:
    """A loss-sums function and the batch weight its mean divides by."""

    fn: Callable
    weight: Callable

    def __call__(self, outputs, batch):
        return self.fn(outputs, batch)


def _example_weight(batch):
    return jnp.sum(batch["example_weight"].astype(jnp.float32))


def _token_weight(batch):
    weights = batch["label_weights"] * batch["example_weight"][:, None]
    return jnp.sum(weights.astype(jnp.float32))


def task_model(kind: str, config: BertConfig, num_labels: int) -> nn.Module:
    """The fine-tuning model of a task kind (with task.json, how restore() rebuilds one)."""
    if kind == "classification":
        return BertForSequenceClassification(config, num_labels)
    if kind == "tagging":
        return BertForTokenClassification(config, num_labels)
    return BertForQuestionAnswering(config)


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One loaded task: its data, head, loss, datasets and official scores."""

    kind: str
    data: Any  # ClassificationTask, TaggingTask or squad.SquadTask
    num_labels: int
    label_names: tuple[str, ...]
    metric_names: tuple[str, ...]  # the first is the one `best` follows
    make_model: Callable[[BertConfig], nn.Module]
    sums: Sums
    # (split, batch_size, process_index, process_count, seed, num_epochs) -> (dataset, batches)
    make_dataset: Callable
    # (outputs, passed) concatenated over the eval split -> ({metric: value}, predictions)
    score: Callable


def load_task(kind: str, data_config, tokenizer, max_position_embeddings: int) -> Task:
    loaders = {
        "classification": _classification_task,
        "tagging": _tagging_task,
        "squad": _squad_task,
    }
    if kind not in loaders:
        raise data_config_lib.ConfigError(
            f"config.task={kind!r}: must be one of {', '.join(loaders)}"
        )
    length = data_config["max_seq_length"]
    if length > max_position_embeddings:
        raise data_config_lib.ConfigError(
            f"config.data.max_seq_length={length} is above the checkpoint's "
            f"max_position_embeddings={max_position_embeddings}"
        )
    return loaders[kind](data_config, tokenizer)


def _classification_task(data_config, tokenizer) -> Task:
    task = classification.load_classification_task(data_config)

    def make_dataset(split, **kwargs):
        dataset, info = classification.make_classification_dataset(
            task, tokenizer, split=split, **kwargs
        )
        return dataset, info.num_batches

    def score(outputs, passed):
        keep = passed["example_weight"] > 0
        logits = outputs[keep]
        predictions = logits[:, 0] if task.is_regression else np.argmax(logits, axis=-1)
        labels = task.eval.labels
        values = {
            name: float(scores.get_metric(name).fn(labels, predictions)) for name in task.metrics
        }
        return values, predictions

    return Task(
        kind="classification",
        data=task,
        num_labels=task.num_labels,
        label_names=task.label_names,
        metric_names=task.metrics,
        make_model=lambda config: task_model("classification", config, task.num_labels),
        sums=Sums(
            losses.regression_sums if task.is_regression else losses.classification_sums,
            _example_weight,
        ),
        make_dataset=make_dataset,
        score=score,
    )


def _tagging_task(data_config, tokenizer) -> Task:
    task = tagging.load_tagging_task(data_config)

    def make_dataset(split, **kwargs):
        dataset, info = tagging.make_tagging_dataset(task, tokenizer, split=split, **kwargs)
        return dataset, info.num_batches

    def score(outputs, passed):
        predicted = tagging.tags_from_predictions(
            np.argmax(outputs, axis=-1),
            passed["word_index"],
            passed["sentence_id"],
            task.eval,
            task.label_names,
        )
        truth = [[task.label_names[t] for t in tags] for tags in task.eval.tags]
        values = scores.entity_scores(truth, predicted, task.config.tagging_scheme)
        return {f"entity_{name}": value for name, value in values.items()}, predicted

    return Task(
        kind="tagging",
        data=task,
        num_labels=len(task.label_names),
        label_names=task.label_names,
        metric_names=("entity_f1", "entity_precision", "entity_recall"),
        make_model=lambda config: task_model("tagging", config, len(task.label_names)),
        sums=Sums(losses.tagging_sums, _token_weight),
        make_dataset=make_dataset,
        score=score,
    )


def _squad_task(data_config, tokenizer) -> Task:
    task = squad.load_squad_task(data_config, tokenizer)

    def make_dataset(split, **kwargs):
        return squad.make_task_dataset(task, split=split, **kwargs)

    def score(outputs, passed):
        start_logits, end_logits = outputs
        predictions = squad.predict_answers(
            task.eval, passed["feature_index"], start_logits, end_logits, tokenizer
        )
        return scores.squad_scores(task.eval.data.gold_answers(), predictions.answers), predictions

    return Task(
        kind="squad",
        data=task,
        num_labels=2,
        label_names=(),
        metric_names=("f1", "exact_match"),
        make_model=lambda config: task_model("squad", config, 2),
        sums=Sums(losses.span_sums, _example_weight),
        make_dataset=make_dataset,
        score=score,
    )


# --------------------------------------------------------------------------- setup


@dataclasses.dataclass
class Run:
    """Everything the loop needs, built and checked before anything compiles."""

    config: ml_collections.ConfigDict
    task: Task
    model_config: BertConfig
    model: nn.Module
    tx: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    state_shardings: Any
    abstract_state: Any
    vocab_file: str
    tokenizer_data: dict  # the pretraining data config the tokenizer follows
    init_scan_layers: bool  # the init checkpoint's layer layout
    num_train_steps: int
    steps_per_epoch: int


def check_config(config: ml_collections.ConfigDict) -> None:
    train.check_keys(
        config,
        TOP_LEVEL_KEYS,
        positive=("train_batch_size", "eval_batch_size", "log_every_steps"),
    )
    if not config.num_train_epochs > 0:
        raise data_config_lib.ConfigError(
            f"config.num_train_epochs={config.num_train_epochs}: must be above 0"
        )
    if not config.init_checkpoint:
        raise data_config_lib.ConfigError(
            "config.init_checkpoint: fine-tuning needs a pretraining or converted workdir "
            "(its architecture, vocabulary and, unless config.random_init, its parameters)"
        )
    unknown_model = sorted(set(config.model.keys()) - set(MODEL_OVERRIDES))
    if unknown_model:
        shape = " (a shape of the checkpoint's)" if unknown_model[0] in SHAPE_FIELDS else ""
        raise data_config_lib.ConfigError(
            f"config.model.{unknown_model[0]}: not changeable when fine-tuning{shape}; "
            f"use one of {', '.join(MODEL_OVERRIDES)}"
        )


def read_tokenizer_data(workdir: str) -> dict:
    """The pretraining data config whose tokenizer settings a workdir's vocabulary goes with."""
    task_path = os.path.join(workdir, TASK_FILE)
    if os.path.exists(task_path):
        with open(task_path, encoding="utf-8") as f:
            return json.load(f)["tokenizer_data"]
    config_path = os.path.join(workdir, checkpoint.CONFIG_FILE)
    if not os.path.exists(config_path):
        raise checkpoint.CheckpointError(f"{workdir}: no {checkpoint.CONFIG_FILE}")
    with open(config_path, encoding="utf-8") as f:
        return json.load(f)["data"]


def build_run(config: ml_collections.ConfigDict, workdir: str, *, devices=None) -> Run:
    """Checks every option, reads the task's data and builds the model; compiles nothing."""
    check_config(config)
    init = config.init_checkpoint
    saved = checkpoint.read_model_config(init)
    if saved is None:
        raise checkpoint.CheckpointError(
            f"config.init_checkpoint={init!r}: no {checkpoint.MODEL_CONFIG_FILE} there"
        )
    overrides = {k: v for k, v in config.model.to_dict().items() if v is not None}
    model_config = dataclasses.replace(saved, **overrides)
    vocab_file = checkpoint.workdir_vocab(init)
    if vocab_file is None:
        raise checkpoint.CheckpointError(f"config.init_checkpoint={init!r}: no vocabulary there")
    _check_same_vocab(workdir, vocab_file)
    vocab_size = len(load_vocab(vocab_file))
    if vocab_size != model_config.vocab_size:
        raise data_config_lib.ConfigError(
            f"config.init_checkpoint={init!r}: its vocabulary {vocab_file} has {vocab_size} "
            f"entries but its model has vocab_size={model_config.vocab_size}"
        )
    tokenizer_data = read_tokenizer_data(init)
    tokenizer = make_tokenizer(data_config_lib.from_config(tokenizer_data), vocab_file)
    task = load_task(
        config.task, config.data.to_dict(), tokenizer, model_config.max_position_embeddings
    )

    mesh = sharding.make_mesh(config.mesh, devices)
    for key in ("train_batch_size", "eval_batch_size"):
        sharding.check_batch_size(config[key], mesh, option=f"config.{key}")
    microbatches = optim.from_config(_optimizer_values(config, 1)).num_microbatches
    if config.train_batch_size % microbatches:
        raise data_config_lib.ConfigError(
            f"config.train_batch_size={config.train_batch_size} is not divisible by "
            f"config.optimizer.num_microbatches={microbatches}"
        )

    try:
        _, num_train_steps = task.make_dataset(
            "train",
            batch_size=config.train_batch_size // jax.process_count(),
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            seed=config.seed,
            num_epochs=config.num_train_epochs,
        )
    except (classification.TaskDataError, squad.SquadError):
        raise
    except ValueError as error:
        raise data_config_lib.ConfigError(
            f"config.num_train_epochs={config.num_train_epochs}, "
            f"config.train_batch_size={config.train_batch_size}: {error}"
        ) from error
    steps_per_epoch = max(1, round(num_train_steps / config.num_train_epochs))

    model = task.make_model(model_config)
    tx = optim.make_optimizer(_optimizer_values(config, num_train_steps), num_train_steps)
    length = config.data.max_seq_length
    state_shardings, abstract_state = train.sharded_abstract_state(
        functools.partial(_init_state, model=model, tx=tx, length=length),
        functools.partial(_init_params, model=model, length=length),
        mesh,
    )
    return Run(
        config=config,
        task=task,
        model_config=model_config,
        model=model,
        tx=tx,
        mesh=mesh,
        state_shardings=state_shardings,
        abstract_state=abstract_state,
        vocab_file=vocab_file,
        tokenizer_data=tokenizer_data,
        init_scan_layers=saved.scan_layers,
        num_train_steps=num_train_steps,
        steps_per_epoch=steps_per_epoch,
    )


def _check_same_vocab(workdir: str, vocab_file: str) -> None:
    """A resumed workdir must have been tokenized with the init checkpoint's vocabulary."""
    existing = checkpoint.workdir_vocab(workdir)
    if existing is None:
        return
    if load_vocab(existing).tokens != load_vocab(vocab_file).tokens:
        raise checkpoint.CheckpointError(
            f"workdir {workdir}: its vocabulary {existing} differs from config.init_checkpoint's "
            f"{vocab_file}; use a new workdir for another checkpoint"
        )


def _optimizer_values(config, num_train_steps: int) -> dict:
    """config.optimizer with warmup_proportion turned into warmup_steps for this run's length."""
    values = config.optimizer.to_dict()
    proportion = values.pop("warmup_proportion")
    if not 0.0 <= proportion <= 1.0:
        raise data_config_lib.ConfigError(
            f"config.optimizer.warmup_proportion={proportion}: must be in [0, 1]"
        )
    return {**values, "warmup_steps": int(num_train_steps * proportion)}


def _init_params(rng, *, model, length):
    ids = jnp.zeros((1, length), jnp.int32)
    return model.init(rng, ids, ids, ids, deterministic=True)["params"]


def _init_state(rng, *, model, tx, length):
    params = nn.meta.unbox(_init_params(rng, model=model, length=length))
    return train.TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def create_state(run: Run):
    """The head freshly initialized; `bert/` from the init checkpoint unless random_init."""
    length = run.config.data.max_seq_length
    init = jax.jit(
        functools.partial(_init_state, model=run.model, tx=run.tx, length=length),
        out_shardings=run.state_shardings,
    )
    state = init(jax.random.key(run.config.seed))
    if run.config.random_init:
        return state
    bert = run.abstract_state.params["bert"]
    layers = run.model_config.num_hidden_layers
    if run.init_scan_layers == run.model_config.scan_layers:
        bert = checkpoint.restore_params(run.config.init_checkpoint, {"bert": bert})["bert"]
    else:
        # The checkpoint's layout, restored whole on every device, then rearranged.
        relayout = stack_layers if run.init_scan_layers else unstack_layers
        saved = jax.eval_shape(lambda p: relayout(p, layers), bert)
        replicated = sharding.replicated(run.mesh)
        saved = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), saved
        )
        bert = checkpoint.restore_params(run.config.init_checkpoint, {"bert": saved})["bert"]
        bert = (unstack_layers if run.init_scan_layers else stack_layers)(bert, layers)
    params = {**state.params, "bert": bert}
    state = state.replace(params=params, opt_state=run.tx.init(params))
    return jax.device_put(state, run.state_shardings)


def jit_steps(run: Run):
    return train.jit_train_and_eval(
        functools.partial(
            finetune_step,
            model=run.model,
            tx=run.tx,
            sums_fn=run.task.sums,
            num_microbatches=run.config.optimizer.num_microbatches,
        ),
        functools.partial(predict_step, model=run.model),
        run.state_shardings,
        run.mesh,
    )


# ---------------------------------------------------------------------------- loop


def train_and_evaluate(
    config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None
) -> dict:
    """Fine-tunes per `config` in `workdir`, resuming from its latest checkpoint if any.

    Returns the results written to results.json.
    """
    run = build_run(config, workdir)
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        return _train(run, workdir, stop_after)


def _train(run: Run, workdir: str, stop_after: int | None) -> dict:
    config = run.config
    vocab_file = checkpoint.write_run_description(workdir, config, run.model_config, run.vocab_file)
    _write_task_file(run, workdir)
    manager = checkpoint.make_manager(workdir, max_to_keep=config.checkpoints_to_keep)
    start_step = manager.latest_step() or 0
    if start_step:
        logging.info("resuming from %s at step %d", workdir, start_step)
        state = checkpoint.restore(manager, start_step, run.abstract_state)
    else:
        state = create_state(run)
    del vocab_file

    p_train_step, p_predict_step = jit_steps(run)
    num_steps = run.num_train_steps
    schedule = optim.learning_rate_schedule(_optimizer_values(config, num_steps), num_steps)
    writer = metrics.MetricWriter(workdir, num_train_steps=num_steps)
    rng = jax.random.key(config.seed)
    train_data, _ = run.task.make_dataset(
        "train",
        batch_size=config.train_batch_size // jax.process_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        seed=config.seed,
        num_epochs=config.num_train_epochs,
    )
    train_batches = train_data.skip(start_step).as_numpy_iterator()
    results = _read_results(workdir)
    primary = scores.get_metric(run.task.metric_names[0])

    window, window_start, window_step = None, time.perf_counter(), start_step
    started = time.perf_counter()
    last_step = num_steps if stop_after is None else min(stop_after, num_steps)
    for step in range(start_step + 1, last_step + 1):
        host_batch = next(train_batches)
        batch = sharding.make_global_batch(
            {k: host_batch[k] for k in _train_features(run.task.kind)}, run.mesh
        )
        state, sums = p_train_step(state, batch, rng)
        window = sums if window is None else jax.tree.map(jnp.add, window, sums)
        writer.progress_bar(step, started, start_step)

        last = step == num_steps
        if step % config.log_every_steps == 0 or last:
            summary = train.checked_finite(losses.summarize_finetune(window), step)
            steps_per_s = (step - window_step) / max(time.perf_counter() - window_start, 1e-9)
            summary["learning_rate"] = float(schedule(step - 1))
            summary["steps_per_second"] = steps_per_s
            writer.write(step, "train", summary)
            writer.console(
                f"step {step:>6}/{num_steps}  loss {summary['loss']:.4f}  "
                f"acc {summary['accuracy']:.3f}  lr {summary['learning_rate']:.2e}  "
                f"{steps_per_s:.2f} steps/s  "
                f"eta {metrics.format_duration((num_steps - step) / max(steps_per_s, 1e-9))}"
            )
            window, window_start, window_step = None, time.perf_counter(), step

        if step % run.steps_per_epoch == 0 or last:
            values, predictions = evaluate(run, state.params, p_predict_step)
            writer.write(step, "eval", values)
            epoch = step / run.steps_per_epoch
            writer.console(
                f"eval after epoch {epoch:.2f} (step {step}): "
                + "  ".join(f"{name} {value:.4f}" for name, value in values.items())
            )
            results["eval"] = {"step": step, **values}
            best = results.get("best")
            if best is None or primary.is_better(values[primary.name], best[primary.name]):
                results["best"] = {"step": step, **values}
            _write_results(run, workdir, results, predictions if last else None)

        if (
            (config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0)
            or step % run.steps_per_epoch == 0
            or step == last_step
        ):
            # Never write parameters that a non-finite loss may have spoiled.
            if window is not None:
                train.checked_finite(losses.summarize_finetune(window), step)
            checkpoint.save(manager, step, state)
    if start_step >= last_step and "eval" not in results:
        values, predictions = evaluate(run, state.params, p_predict_step)
        results["eval"] = results["best"] = {"step": start_step, **values}
        _write_results(run, workdir, results, predictions)
    manager.wait_until_finished()
    manager.close()
    writer.close()
    return results


def _train_features(kind: str) -> tuple[str, ...]:
    common = ("input_ids", "input_mask", "segment_ids", "example_weight")
    return (
        common
        + {
            "classification": ("label",),
            "tagging": ("label_ids", "label_weights"),
            "squad": ("start_positions", "end_positions"),
        }[kind]
    )


def evaluate(run: Run, params, p_predict_step) -> tuple[dict, Any]:
    """The official metrics over the whole eval split, and the predictions they scored."""
    config = run.config
    dataset, _ = run.task.make_dataset(
        "eval",
        batch_size=config.eval_batch_size // jax.process_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        seed=config.seed,
        num_epochs=1,
    )
    outputs, passed = [], []
    for host_batch in dataset.as_numpy_iterator():
        out, extra = p_predict_step(params, sharding.make_global_batch(host_batch, run.mesh))
        outputs.append(jax.tree.map(np.asarray, out))
        passed.append(jax.tree.map(np.asarray, extra))
    outputs = jax.tree.map(lambda *xs: np.concatenate(xs), *outputs)
    passed = jax.tree.map(lambda *xs: np.concatenate(xs), *passed)
    return run.task.score(outputs, passed)


# ----------------------------------------------------------------- workdir files


def _write_task_file(run: Run, workdir: str) -> None:
    if jax.process_index() != 0:
        return
    task = {
        "kind": run.task.kind,
        "num_labels": run.task.num_labels,
        "label_names": list(run.task.label_names),
        "metrics": list(run.task.metric_names),
        "max_seq_length": run.config.data.max_seq_length,
        "data": run.config.data.to_dict(),
        "init_checkpoint": run.config.init_checkpoint,
        "tokenizer_data": run.tokenizer_data,
    }
    checkpoint.write_json(os.path.join(workdir, TASK_FILE), task)


def read_task_file(workdir: str) -> dict | None:
    path = os.path.join(workdir, TASK_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _read_results(workdir: str) -> dict:
    path = os.path.join(workdir, RESULTS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_results(run: Run, workdir: str, results: dict, predictions) -> None:
    if jax.process_index() != 0:
        return
    results = {**results, "task": run.task.kind, "init_checkpoint": run.config.init_checkpoint}
    checkpoint.write_json(os.path.join(workdir, RESULTS_FILE), results)
    if predictions is None:
        return
    if run.task.kind == "squad":
        squad.write_predictions(predictions, workdir)
    else:
        write_eval_predictions(
            run.task, predictions, os.path.join(workdir, "eval_predictions.jsonl")
        )


def write_eval_predictions(task: Task, predictions, path: str) -> None:
    """One JSON line per eval example: its label (or score, or word tags) as predicted."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for value in predictions:
            if task.kind == "tagging":
                record = {"tags": list(value)}
            elif task.label_names:
                record = {"label": task.label_names[int(value)]}
            else:
                record = {"score": float(value)}
            f.write(json.dumps(record) + "\n")
    os.replace(path + ".tmp", path)


def print_results(results: dict, *, out) -> None:
    """The end of a fine-tuning run, for a person: final and best scores."""
    for name in ("eval", "best"):
        values = results.get(name)
        if values:
            scored = "  ".join(f"{k} {v:.4f}" for k, v in values.items() if k != "step")
            print(
                f"{'final' if name == 'eval' else 'best '} (step {values['step']}): {scored}",
                file=out,
            )
