r"""Sentence (pair) classification and regression as a task: the pooled [CLS] output to K
logits, or one score (paper section 4.1, GLUE).

    python -m bertjax.main --config experiments/finetune/glue.py:mrpc --workdir DIR \
        --config.init_checkpoint=PRETRAINED_WORKDIR

The input is data_pipeline/finetune/classification_input.py (GLUE from TFDS, or TSV/CSV/JSONL
files). The scores are the task's official metrics (scores.py). A fine-tuned
workdir answers `classify(restore(workdir), texts, pairs)` and predicts a file
with `python -m bertjax.predict`.
"""

import functools
import os
from collections.abc import Sequence

import jax
import numpy as np
import tensorflow as tf

from bertjax import losses
from bertjax import workdir as workdir_lib
from bertjax.model import BertForSequenceClassification
from bertjax.tasks import finetune, scores
from bertjax.tasks.contract import (
    Description,
    HFClass,
    Serving,
    Setup,
    Task,
    dataset_batch_shapes,
    host_share,
)
from data_pipeline.finetune import classification_config, classification_input
from data_pipeline.progress import Progress


def setup(config, workdir: str) -> Setup:
    pretrained = finetune.load_pretrained(config, workdir)
    data = classification_input.load_classification_task(config.data.to_dict())
    packed_shape = finetune.PackedShapes(
        functools.partial(classification_input.packed_shape, data, pretrained.tokenizer),
        config.optimizer.num_microbatches,
    )

    def make_dataset(split, position=None, **kwargs):
        packed = packed_shape.for_dataset(split, kwargs) if data.config.pack_examples else None
        dataset, info = classification_input.make_classification_dataset(
            data, pretrained.tokenizer, split=split, position=position, packed=packed, **kwargs
        )
        return dataset, info.num_batches

    def score(outputs, passed):
        logits = outputs[passed["example_weight"] > 0]
        predictions = logits[:, 0] if data.is_regression else np.argmax(logits, axis=-1)
        labels = data.eval.labels
        values = {
            name: float(scores.get_metric(name).fn(labels, predictions)) for name in data.metrics
        }
        return values, predictions

    def packed_slots() -> int:  # the model's init only needs some: train's, else eval's
        split, key = ("train", "train_batch_size") if data.train else ("eval", "eval_batch_size")
        host = host_share(config, key)
        return packed_shape(
            split,
            batch_size=host["batch_size"],
            process_count=host["process_count"],
            seed=host["seed"],
            num_epochs=config.num_train_epochs if split == "train" else 1,
        ).slots

    def write_predictions(predictions, workdir: str) -> None:
        # Each example's predicted label, or its score for regression.
        names = data.label_names
        records = [{"label": names[int(v)]} if names else {"score": float(v)} for v in predictions]
        workdir_lib.write_lines(os.path.join(workdir, workdir_lib.EVAL_PREDICTIONS_FILE), records)

    head = finetune.Head(
        model=BertForSequenceClassification(pretrained.model_config, data.num_labels),
        num_labels=data.num_labels,
        label_names=data.label_names,
        metric_names=data.metrics,
        label_features=("label",),
        sums=losses.regression_sums if data.is_regression else losses.classification_sums,
        weight=finetune.example_weight,
        score=score,
        write_predictions=write_predictions,
    )
    packed = packed_slots if data.config.pack_examples else None
    return finetune.make_setup(config, pretrained, head, make_dataset, packed)


def best_metric(config) -> scores.Metric:
    """The first of the task's metrics (GLUE's for its task, or config.data.metrics)."""
    data = classification_config.from_config(config.data)
    return scores.get_metric(classification_input.metric_names(data)[0])


def predicted(
    restored, text_a, text_b, batch_size: int = 256, progress: Progress | None = None
) -> np.ndarray:
    """Each example's label id (the argmax), or its score for regression: int32 or
    float32 [N]. One compiled forward pass over batches of `batch_size`, the last
    padded, so a test set of any size compiles once; `progress` counts the batches."""
    restored.require("classification", "predicted")
    out = []
    for begin in range(0, len(text_a), batch_size):
        a = list(text_a[begin : begin + batch_size])
        b = list(text_b[begin : begin + batch_size])
        count = len(a)
        features = _encode(
            restored, a + [""] * (batch_size - count), b + [""] * (batch_size - count)
        )
        out.append(np.asarray(restored.apply(features))[:count])
        if progress is not None:
            progress.advance()
    logits = np.concatenate(out) if out else np.zeros((0, 1), np.float32)
    if not restored.task.label_names:
        return logits[:, 0].astype(np.float32)
    return np.argmax(logits, axis=-1).astype(np.int32)


def classify(restored, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[dict]:
    """Per text (with `pairs[i]`): {'label', 'probabilities': {label: p}}, or {'score'}.

    Texts are encoded and truncated exactly as the task's training examples were.
    """
    restored.require("classification", "classify")
    if isinstance(texts, str):
        raise TypeError("pass a list of texts, not one string")
    features = _encode(
        restored, list(texts), list(pairs) if pairs is not None else [""] * len(texts)
    )
    logits = np.asarray(restored.apply(features))
    labels = restored.task.label_names
    if not labels:
        return [{"score": float(row[0])} for row in logits]
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    return [
        {
            "label": labels[int(np.argmax(row))],
            "probabilities": {label: float(p) for label, p in zip(labels, row, strict=True)},
        }
        for row in probs
    ]


def _encode(restored, text_a: list[str], text_b: list[str]) -> dict:
    """classification_input.encode_texts with the restored task's tokenizer and length."""
    vocab = restored.tokenizer.vocab
    return classification_input.encode_texts(
        restored.tokenizer,
        tf.constant(text_a, tf.string),
        tf.constant(text_b, tf.string),
        max_seq_length=restored.max_seq_length,
        cls_id=vocab.cls_id,
        sep_id=vocab.sep_id,
        pad_id=vocab.pad_id,
    )


def predict_file(restored, input_path: str, output: str, batch_size: int) -> str:
    """A TSV, CSV or JSONL file with the task's text columns -> JSON lines of classify()."""
    output = output or input_path + ".predictions.jsonl"
    text_a, text_b = classification_input.read_texts(restored.task.data, input_path)
    predicting = Progress(f"predicting {input_path}", -(-len(text_a) // batch_size), unit="batches")
    records = []
    for begin in range(0, len(text_a), batch_size):
        rows = slice(begin, begin + batch_size)
        records += classify(restored, text_a[rows], pairs=text_b[rows])
        predicting.advance()
    predicting.finish()
    workdir_lib.write_lines(output, records)
    return output


def serving(restored) -> Serving:
    """The SavedModel's: `text` (and `text_pair` for a task of pairs) in; `probabilities`,
    `logits` and `label` out, or `score` for regression."""
    labels = restored.task.label_names
    pairs = bool((restored.task.data or {}).get("text_b"))

    def preprocess(texts: dict) -> dict:
        text = texts["text"]
        features = classification_input.encode_texts(
            restored.tokenizer,
            text,
            texts["text_pair"] if pairs else tf.fill(tf.shape(text), ""),
            max_seq_length=restored.max_seq_length,
            cls_id=restored.tokenizer.vocab.cls_id,
            sep_id=restored.tokenizer.vocab.sep_id,
            pad_id=restored.tokenizer.vocab.pad_id,
        )
        return {name: tf.cast(features[name], tf.int32) for name in finetune.MODEL_INPUTS}

    def forward(params, inputs: dict):
        model_inputs = (inputs[name] for name in finetune.MODEL_INPUTS)
        return restored.model.apply({"params": params}, *model_inputs, deterministic=True)

    def postprocess(logits, features) -> dict:
        del features
        if not labels:
            return {"score": logits[:, 0]}
        label = tf.gather(tf.constant(list(labels)), tf.argmax(logits, axis=-1))
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1), "label": label}

    return Serving(
        texts=("text", "text_pair") if pairs else ("text",),
        preprocess=preprocess,
        inputs=dict.fromkeys(finetune.MODEL_INPUTS, "(b, l)"),
        length=restored.max_seq_length,
        forward=forward,
        postprocess=postprocess,
    )


def hf_config(description: Description) -> dict:
    """config.json's head fields: the labels, or regression for a single output."""
    if description.num_labels == 1:
        return {"num_labels": 1, "problem_type": "regression"}
    return {**finetune.hf_labels(description), "problem_type": "single_label_classification"}


TASK = Task(
    name="classification",
    setup=setup,
    make_model=lambda model_config, description: BertForSequenceClassification(
        model_config, description.num_labels
    ),
    best_metric=best_metric,
    forward_flops=finetune.forward_flops_pooled,
    batch_shapes=dataset_batch_shapes,
    check_config=finetune.config_checker(classification_config.from_config),
    without_data=finetune.without_checkpoint,
    predict_file=predict_file,
    report=finetune.report,
    serving=serving,
    hf_class=finetune.hf_classes(
        {
            "bert": HFClass("BertForSequenceClassification", {"classifier": "classifier"}),
            "modernbert": HFClass(
                "ModernBertForSequenceClassification", {"classifier": "classifier"}
            ),
        },
        config=hf_config,
    ),
)
