r"""Tagging as a task: a label per word from the sequence output of its first piece
(paper section 5.3, CoNLL-2003 NER).

    python -m bertjax.main --config experiments/finetune/ner.py --workdir DIR \
        --config.init_checkpoint=PRETRAINED_WORKDIR

The input is data_pipeline/finetune/tagging_input.py (CoNLL files or TFDS); the score is
entity-level precision, recall and F1 (scores.py). A fine-tuned workdir
answers `tag(restore(workdir), "Anna moved to Berlin")`.
"""

import functools
import os
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from bertjax import losses
from bertjax import workdir as workdir_lib
from bertjax.model import BertForTokenClassification
from bertjax.tasks import finetune, scores
from bertjax.tasks.contract import HFClass, Serving, Setup, Task, dataset_batch_shapes
from data_pipeline.finetune import tagging_config, tagging_input
from data_pipeline.finetune.records import read_text_file
from data_pipeline.progress import Progress

METRIC_NAMES = ("entity_f1", "entity_precision", "entity_recall")


def setup(config, workdir: str) -> Setup:
    pretrained = finetune.load_pretrained(config, workdir)
    data = tagging_input.load_tagging_task(config.data.to_dict())
    num_labels = len(data.label_names)
    packed_shape = finetune.PackedShapes(
        functools.partial(tagging_input.packed_shape, data, pretrained.tokenizer),
        config.optimizer.num_microbatches,
    )

    def make_dataset(split, position=None, **kwargs):
        packed = packed_shape.for_dataset(split, kwargs) if data.config.pack_examples else None
        dataset, info = tagging_input.make_tagging_dataset(
            data, pretrained.tokenizer, split=split, position=position, packed=packed, **kwargs
        )
        return dataset, info.num_batches

    def score(outputs, passed):
        predicted = tagging_input.tags_from_predictions(
            np.argmax(outputs, axis=-1),
            passed["word_index"],
            passed["sentence_id"],
            data.eval,
            data.label_names,
        )
        truth = [[data.label_names[t] for t in tags] for tags in data.eval.tags]
        values = scores.entity_scores(truth, predicted, data.config.tagging_scheme)
        return {f"entity_{name}": value for name, value in values.items()}, predicted

    def write_predictions(predictions, workdir: str) -> None:
        workdir_lib.write_lines(
            os.path.join(workdir, workdir_lib.EVAL_PREDICTIONS_FILE),
            [{"tags": list(tags)} for tags in predictions],
        )

    head = finetune.Head(
        model=BertForTokenClassification(pretrained.model_config, num_labels),
        num_labels=num_labels,
        label_names=data.label_names,
        metric_names=METRIC_NAMES,
        label_features=("label_ids", "label_weights"),
        sums=losses.tagging_sums,
        weight=_token_weight,
        score=score,
        write_predictions=write_predictions,
        token_padding=tagging_input.TOKEN_PADDING,
    )
    return finetune.make_setup(config, pretrained, head, make_dataset)


def _token_weight(batch):
    """The labelled tokens of the batch's real examples: what the loss averages over."""
    return jnp.sum(losses.token_weights(batch))


def tag(restored, text: str | Sequence[str]) -> list[tuple[str, str]]:
    """(word, tag) for each word of `text` (split at whitespace, or a list of words)."""
    restored.require("tagging", "tag")
    words = tuple(text.split() if isinstance(text, str) else text)
    if not words:
        return []
    sentences = tagging_input.Sentences("text", (words,), (np.zeros(len(words), np.int32),))
    features, _ = tagging_input.encode_sentences(
        sentences, restored.tokenizer, max_seq_length=restored.max_seq_length
    )
    logits = np.asarray(restored.apply(features))
    [tags] = tagging_input.tags_from_predictions(
        np.argmax(logits, axis=-1),
        features["word_index"],
        features["sentence_id"],
        sentences,
        restored.task.label_names,
    )
    return list(zip(words, tags, strict=True))


def serving(restored) -> Serving:
    """The SavedModel's: `text` in, split into words at whitespace as `tag` splits it;
    `tags` out, [B, the most words of a text], "" past a text's last word."""
    labels = tf.constant(list(restored.task.label_names))
    length = restored.max_seq_length

    def preprocess(texts: dict) -> dict:
        return tagging_input.encode_texts(restored.tokenizer, texts["text"], max_seq_length=length)

    def forward(params, inputs: dict):
        model_inputs = (inputs[name] for name in finetune.MODEL_INPUTS)
        logits = restored.model.apply({"params": params}, *model_inputs, deterministic=True)
        # Each word's tag is read off its first piece, in the window that holds it.
        return {
            "logits": logits[inputs["word_row"], inputs["word_position"]],
            "word_splits": inputs["word_splits"],
        }

    def postprocess(outputs: dict, features) -> dict:
        del features
        tags = tf.gather(labels, tf.argmax(outputs["logits"], axis=-1))
        tags = tf.RaggedTensor.from_row_splits(tags, tf.cast(outputs["word_splits"], tf.int64))
        return {"tags": tags.to_tensor("")}

    return Serving(
        texts=("text",),
        preprocess=preprocess,
        inputs={
            **dict.fromkeys(finetune.MODEL_INPUTS, "(r, l)"),
            "word_row": "(n,)",
            "word_position": "(n,)",
            "word_splits": "(s,)",
        },
        length=length,
        forward=forward,
        postprocess=postprocess,
    )


def predict_file(restored, input_path: str, output: str, batch_size: int) -> str:
    """Plain text, one sentence per line, words split at whitespace -> JSON lines
    {"words": [...], "tags": [...]}."""
    del batch_size  # one sentence per forward pass
    output = output or input_path + ".predictions.jsonl"
    lines = [line.split() for line in read_text_file(input_path).splitlines() if line.strip()]
    predicting = Progress(f"predicting {input_path}", len(lines), unit="sentences")
    records = []
    for words in lines:
        records.append({"words": words, "tags": [label for _, label in tag(restored, words)]})
        predicting.advance()
    predicting.finish()
    workdir_lib.write_lines(output, records)
    return output


TASK = Task(
    name="tagging",
    setup=setup,
    make_model=lambda model_config, description: BertForTokenClassification(
        model_config, description.num_labels
    ),
    best_metric=lambda config: scores.get_metric(METRIC_NAMES[0]),
    forward_flops=finetune.forward_flops_per_token,
    batch_shapes=dataset_batch_shapes,
    check_config=finetune.config_checker(tagging_config.from_config),
    without_data=finetune.without_checkpoint,
    predict_file=predict_file,
    report=finetune.report,
    hf_class=finetune.hf_classes(
        {
            # transformers' token class has no pooler (add_pooling_layer=False)
            "bert": HFClass("BertForTokenClassification", {"classifier": "classifier"}, False),
            "modernbert": HFClass("ModernBertForTokenClassification", {"classifier": "classifier"}),
        },
        config=finetune.hf_labels,
    ),
    serving=serving,
)
