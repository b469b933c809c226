"""Using a trained or converted checkpoint from Python (a notebook, a script).

    import bertjax
    restored = bertjax.restore("demo_out")          # latest step; step=N for another
    bertjax.fill_mask(restored, "The [MASK] statement raises an exception.")
    out = bertjax.encode(restored, ["first text", "second text"])
    vectors = bertjax.embed(restored, texts)         # mean-pooled, [N, hidden]
    bertjax.next_sentence(restored, "A sentence.", "The one after it?")

`restore` takes a pretraining workdir, one written by `bertjax.convert
import`, or a fine-tuning workdir. It restores onto the first local device,
whatever mesh wrote the checkpoint, or sharded over `mesh` when one is given.
Encoder layers come back in the loop layout (`layer_0`, `layer_1`, ...) even
from a `scan_layers` run, so notebooks can index them.

A fine-tuned workdir brings its head, and answers in its task's terms:

    restored = bertjax.restore("runs/mrpc")
    bertjax.classify(restored, ["The cat sat."], pairs=["A cat was sitting."])
    bertjax.tag(restored, "John lives in Berlin")           # runs/ner
    bertjax.answer(restored, "Who wrote it?", "It was written by Ada.")  # runs/squad

encode/embed/attention_maps work on every workdir; fill_mask and
next_sentence need the pretraining heads.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from flax import linen as nn

from bertjax import checkpoint, finetune, sharding
from bertjax.model import BertConfig, BertForPreTraining, BertModel, unstack_layers
from data_pipeline import classification, squad, tagging
from data_pipeline import config as data_config_lib
from data_pipeline.tokenizer import make_tokenizer

MASK_TEXT = "[MASK]"


@dataclasses.dataclass
class Restored:
    """A model with its parameters, config and tokenizer."""

    model: nn.Module  # BertForPreTraining, or a fine-tuning task's model
    params: Any
    config: BertConfig
    tokenizer: Any
    step: int
    # The sequence length the run trained with; longer inputs are refused.
    max_seq_length: int
    # A fine-tuning workdir's task.json (kind, label_names, data, ...); None otherwise.
    task: dict | None = None


def restore(path: str, step: int | None = None, mesh: jax.sharding.Mesh | None = None) -> Restored:
    """Restores a workdir's checkpoint (latest or `step`), on one device or over `mesh`."""
    saved_config = checkpoint.read_model_config(path)
    if saved_config is None:
        raise checkpoint.CheckpointError(
            f"{path}: no {checkpoint.MODEL_CONFIG_FILE}; expected a bertjax workdir "
            "(a training run or the output of `python -m bertjax.convert import`)"
        )
    task = finetune.read_task_file(path)
    data = data_config_lib.from_config(finetune.read_tokenizer_data(path))
    vocab_file = checkpoint.workdir_vocab(path)
    if vocab_file is None:
        raise checkpoint.CheckpointError(f"{path}: no vocabulary (vocab.txt, .json or .model)")
    tokenizer = make_tokenizer(data, vocab_file)
    step = checkpoint.latest_step(path) if step is None else step
    if step is None:
        raise checkpoint.CheckpointError(f"{path}: no checkpoint to restore")

    # The checkpoint's own layout first; then the loop layout for inference.
    saved_model = _model(saved_config, task)
    boxed = jax.eval_shape(lambda rng: _init(saved_model, rng), jax.random.key(0))
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: device, nn.meta.unbox(boxed))
    else:
        shardings = sharding.logical_shardings(boxed, mesh)
    abstract = jax.tree.map(
        lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s),
        nn.meta.unbox(boxed),
        shardings,
    )
    params = checkpoint.restore_params(path, abstract, step)
    config = dataclasses.replace(saved_config, scan_layers=False, remat_policy="none")
    params = {**params, "bert": unstack_layers(params["bert"], config.num_hidden_layers)}
    length = task["max_seq_length"] if task else data.max_seq_length
    return Restored(
        model=_model(config, task),
        params=params,
        config=config,
        tokenizer=tokenizer,
        step=step,
        max_seq_length=min(length, config.max_position_embeddings),
        task=task,
    )


def _model(config: BertConfig, task: dict | None) -> nn.Module:
    if task is None:
        return BertForPreTraining(config)
    return finetune.task_model(task["kind"], config, task["num_labels"])


def _init(model: nn.Module, rng):
    ids = jnp.zeros((1, 8), jnp.int32)
    extra = (ids[:, :1],) if isinstance(model, BertForPreTraining) else ()
    return model.init(rng, ids, ids, ids, *extra, deterministic=True)["params"]


def _require(restored: Restored, kind: str | None, what: str) -> None:
    """Fails unless the restored model has the head `what` needs."""
    have = restored.task["kind"] if restored.task else None
    if have != kind:
        needs = f"a {kind} fine-tuning workdir" if kind else "the pretraining heads"
        has = f"a {have} fine-tuning workdir" if have else "a pretraining workdir"
        raise ValueError(f"{what} needs {needs}; this is {has}")


# --------------------------------------------------------------------------- inputs


def _pack(restored: Restored, texts_a: Sequence[str], texts_b: Sequence[str] | None = None):
    """[CLS] A [SEP] (B [SEP]) per row, padded to the longest row: numpy ids, mask, segments.

    Texts longer than the run's max_seq_length are refused rather than cut: a
    notebook answer about a silently truncated text would mislead.
    """
    vocab = restored.tokenizer.vocab
    if isinstance(texts_a, str):
        raise TypeError("pass a list of texts, not one string")
    tokens_a = restored.tokenizer.tokenize(tf.constant(list(texts_a), tf.string)).to_list()
    tokens_b = (
        restored.tokenizer.tokenize(tf.constant(list(texts_b), tf.string)).to_list()
        if texts_b is not None
        else [None] * len(tokens_a)
    )
    rows = []
    for index, (a, b) in enumerate(zip(tokens_a, tokens_b, strict=True)):
        ids = [vocab.cls_id, *a, vocab.sep_id]
        segments = [0] * len(ids)
        if b is not None:
            ids += [*b, vocab.sep_id]
            segments += [1] * (len(b) + 1)
        if len(ids) > restored.max_seq_length:
            raise ValueError(
                f"text {index} is {len(ids)} tokens with [CLS]/[SEP], longer than the "
                f"model's max_seq_length {restored.max_seq_length}"
            )
        rows.append((ids, segments))
    length = max(len(ids) for ids, _ in rows)
    input_ids = np.zeros((len(rows), length), np.int32)
    segment_ids = np.zeros_like(input_ids)
    input_mask = np.zeros_like(input_ids)
    for row, (ids, segments) in enumerate(rows):
        input_ids[row, : len(ids)] = ids
        segment_ids[row, : len(ids)] = segments
        input_mask[row, : len(ids)] = 1
    return input_ids, input_mask, segment_ids


# --------------------------------------------------------------------------- helpers


def encode(restored: Restored, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict:
    """The encoder's outputs for `texts` (each paired with `pairs[i]` when given), as NumPy.

    Returns `sequence_output` [N, L, H], `pooled_output` [N, H], and the
    `input_ids`, `input_mask`, `segment_ids` [N, L] they were computed from
    (L: the longest text in tokens; rows are padded with input_mask 0).
    """
    input_ids, input_mask, segment_ids = _pack(restored, texts, pairs)
    sequence_output, pooled_output = BertModel(restored.config).apply(
        {"params": restored.params["bert"]},
        input_ids,
        input_mask,
        segment_ids,
        deterministic=True,
    )
    return {
        "sequence_output": np.asarray(sequence_output, np.float32),
        "pooled_output": np.asarray(pooled_output, np.float32),
        "input_ids": input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
    }


POOLINGS = ("mean", "cls", "pooler")


def embed(restored: Restored, texts: Sequence[str], pooling: str = "mean") -> np.ndarray:
    """One vector per text [N, H]: the mean over real tokens, the [CLS] state, or the pooler."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}: use one of {', '.join(POOLINGS)}")
    out = encode(restored, texts)
    if pooling == "pooler":
        return out["pooled_output"]
    if pooling == "cls":
        return out["sequence_output"][:, 0]
    mask = out["input_mask"][..., None].astype(np.float32)
    return (out["sequence_output"] * mask).sum(axis=1) / mask.sum(axis=1)


def next_sentence(restored: Restored, first: str, second: str) -> float:
    """The model's probability that `second` follows `first` (the NSP head's IsNext)."""
    _require(restored, None, "next_sentence")
    input_ids, input_mask, segment_ids = _pack(restored, [first], [second])
    _, nsp_logits = restored.model.apply(
        {"params": restored.params},
        input_ids,
        input_mask,
        segment_ids,
        np.zeros((1, 1), np.int32),
        deterministic=True,
    )
    # Label 0 is IsNext, as in the original data and data_pipeline.
    return float(jax.nn.softmax(nsp_logits[0])[0])


def fill_mask(restored: Restored, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each `[MASK]` in `text`, the `top_k` tokens and their probabilities."""
    _require(restored, None, "fill_mask")
    vocab = restored.tokenizer.vocab
    pieces = text.split(MASK_TEXT)
    if len(pieces) < 2:
        raise ValueError(f"no {MASK_TEXT} in {text!r}")
    encoded = restored.tokenizer.tokenize(tf.constant(pieces)).to_list()
    ids = [vocab.cls_id]
    positions = []
    for index, piece in enumerate(encoded):
        if index:
            positions.append(len(ids))
            ids.append(vocab.mask_id)
        ids.extend(piece)
    ids.append(vocab.sep_id)
    if len(ids) > restored.max_seq_length:
        raise ValueError(
            f"{len(ids)} tokens: longer than the model's max_seq_length {restored.max_seq_length}"
        )
    input_ids = jnp.asarray([ids], jnp.int32)
    ones = jnp.ones_like(input_ids)
    mlm_logits, _ = restored.model.apply(
        {"params": restored.params},
        input_ids,
        ones,
        jnp.zeros_like(input_ids),
        jnp.asarray([positions], jnp.int32),
        deterministic=True,
    )
    probs = np.asarray(jax.nn.softmax(mlm_logits[0], axis=-1))
    results = []
    for row in probs:
        best = np.argsort(-row)[:top_k]
        results.append([(vocab.tokens[i], float(row[i])) for i in best])
    return results


def attention_maps(restored: Restored, text: str) -> tuple[np.ndarray, list[str]]:
    """Attention probabilities of every layer and head for one text: [layers, heads, L, L].

    jax.nn.dot_product_attention does not return its probabilities, so they are
    recomputed from the captured query and key projections (the same softmax
    of q.k / sqrt(head_dim); no padding in a single text).
    """
    input_ids, input_mask, segment_ids = _pack(restored, [text])
    _, state = BertModel(restored.config).apply(
        {"params": restored.params["bert"]},
        input_ids,
        input_mask,
        segment_ids,
        deterministic=True,
        capture_intermediates=lambda module, _: module.name in ("query", "key"),
        mutable=["intermediates"],
    )
    encoder = state["intermediates"]["encoder"]
    maps = []
    for i in range(restored.config.num_hidden_layers):
        attention = encoder[f"layer_{i}"]["attention"]
        query = attention["query"]["__call__"][0][0].astype(jnp.float32)
        key = attention["key"]["__call__"][0][0].astype(jnp.float32)
        scores = jnp.einsum("qnh,knh->nqk", query, key) / np.sqrt(query.shape[-1])
        maps.append(np.asarray(jax.nn.softmax(scores, axis=-1)))
    return np.stack(maps), restored.tokenizer.vocab.decode(input_ids[0])


# ------------------------------------------------------------- fine-tuned models


def classify(
    restored: Restored, texts: Sequence[str], pairs: Sequence[str] | None = None
) -> list[dict]:
    """Per text (with `pairs[i]`): {'label', 'probabilities': {label: p}}, or {'score'}.

    Texts are encoded and truncated exactly as the task's training examples were.
    """
    _require(restored, "classification", "classify")
    if isinstance(texts, str):
        raise TypeError("pass a list of texts, not one string")
    vocab = restored.tokenizer.vocab
    features = classification.encode_texts(
        restored.tokenizer,
        tf.constant(list(texts), tf.string),
        tf.constant(list(pairs) if pairs is not None else [""] * len(texts), tf.string),
        max_seq_length=restored.max_seq_length,
        cls_id=vocab.cls_id,
        sep_id=vocab.sep_id,
        pad_id=vocab.pad_id,
    )
    logits = np.asarray(_apply(restored, features))
    labels = restored.task["label_names"]
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


def tag(restored: Restored, text: str | Sequence[str]) -> list[tuple[str, str]]:
    """(word, tag) for each word of `text` (split at whitespace, or a list of words)."""
    _require(restored, "tagging", "tag")
    words = tuple(text.split() if isinstance(text, str) else text)
    if not words:
        return []
    sentences = tagging.Sentences("text", (words,), (np.zeros(len(words), np.int32),))
    features, _ = tagging.encode_sentences(
        sentences, restored.tokenizer, max_seq_length=restored.max_seq_length
    )
    logits = np.asarray(_apply(restored, features))
    [tags] = tagging.tags_from_predictions(
        np.argmax(logits, axis=-1),
        features["word_index"],
        features["sentence_id"],
        sentences,
        restored.task["label_names"],
    )
    return list(zip(words, tags, strict=True))


def answer(restored: Restored, question: str, context: str) -> dict:
    """The answer span in `context`: {'text', 'probability', 'nbest'}; text '' for no answer."""
    _require(restored, "squad", "answer")
    examples = squad.SquadData(
        "answer()",
        (squad.SquadExample("q", question, context, answers=(), is_impossible=True),),
    )
    predictions = predict_answers(restored, examples)
    best = predictions.nbest["q"]
    return {
        "text": predictions.answers["q"],
        "probability": best[0]["probability"] if best else 0.0,
        "nbest": best,
    }


def predict_answers(restored: Restored, data, batch_size: int = 32):
    """squad.SquadPredictions for every question of `data` (a squad.SquadData)."""
    _require(restored, "squad", "predict_answers")
    config = squad.from_config(restored.task["data"])
    features = squad.make_features(data, restored.tokenizer, config)
    starts, ends = [], []
    for begin in range(0, features.num_features, batch_size):
        rows = slice(begin, begin + batch_size)
        start, end = _apply(
            restored,
            {
                "input_ids": features.input_ids[rows],
                "input_mask": features.input_mask[rows],
                "segment_ids": features.segment_ids[rows],
            },
        )
        starts.append(np.asarray(start))
        ends.append(np.asarray(end))
    return squad.predict_answers(
        features,
        np.arange(features.num_features, dtype=np.int32),
        np.concatenate(starts),
        np.concatenate(ends),
        restored.tokenizer,
    )


def _apply(restored: Restored, features):
    return restored.model.apply(
        {"params": restored.params},
        np.asarray(features["input_ids"], np.int32),
        np.asarray(features["input_mask"], np.int32),
        np.asarray(features["segment_ids"], np.int32),
        deterministic=True,
    )
