"""The retrieval task's input: (query, positive passage[, hard negatives]) pairs to train an
embedder on, and a collection (queries, corpus, relevance judgments) to evaluate it on.

Two sources:

    beir_dir     a BEIR-layout directory: corpus.jsonl ({"_id", "title", "text"}; a
                 passage is its title and text joined by a space, as BEIR embeds it),
                 queries.jsonl ({"_id", "text"}), qrels/<split>.tsv (query-id,
                 corpus-id, score with a header). Training pairs are train_split's
                 judgments above 0, each with the first num_negatives negatives of
                 its query's line in negatives_file, if given (the mining tool's,
                 mined.py); evaluation is eval_split's.
    train_file   TSV, CSV or JSONL rows of named columns: `anchor`, `positive` and the
    eval_file    `negatives` columns, each a text. Evaluated as a collection: the
                 anchors are the queries, the distinct positive and negative texts
                 the corpus, each anchor's positives its relevant passages.

Texts without pairs (`texts`, for the distillation loss 'mse') replace the training
pairs: "collection", beir_dir's passages and the queries its train_split judges; or a
file of texts, a line each (.txt, blank lines skipped) or a "text" column (TSV, CSV,
JSONL). They are laid out two to a row, in the query's slot and the passage's, each cut
to max_seq_length; an odd count's last row repeats the first text.

For Margin-MSE (`margins=True`), each training row also carries its teacher's margins,
the teacher's score of the positive less its score of each negative: the `margins`
columns of a train_file, or a negatives_file mined with a scorer (its
"scorer_positives" less its "scorer_scores").

A text is read as `[CLS] text [SEP]`, cut to max_query_length (queries) or
max_seq_length (passages) tokens. A batch pads its queries to the shortest of a few
lengths that holds its longest query, and its passages likewise (`length_buckets`:
the maximum and halvings of it, multiples of 8, records.bucket_lengths), chosen over the
whole global batch so that every process pads alike. The shapes are static: a run
compiles at most one program per pair of lengths, however many batches it reads.

Training batches (records.batch_indices draws them, so they resume mid-epoch):

    query_ids, query_mask          int32 [B, Lq], Lq a bucket of max_query_length
    passage_ids, passage_mask      int32 [B, P * Lp]: the positive, then each hard
                                   negative (P = 1 + negatives), Lp a bucket of
                                   max_seq_length
    query_key                      int32 [B]: equal for the same query text
    passage_keys                   int32 [B, P]: equal for the same passage text
    example_weight                 float32 [B], 1
    teacher_margins                float32 [B, P - 1], with margins
    stream_position                int64 [B, 1]

The keys let the loss see that another row's positive is this row's positive too,
not a negative. Evaluation batches have the same layout: row i holds query i and
passages iP to iP + P - 1 of the collection, with `query_index` int32 [B] and
`passage_index` int32 [B, P] (-1 past the end of either list), and example_weight 0
on rows past both.
"""

import dataclasses
import functools
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline.config import fail
from data_pipeline.finetune import mined, records
from data_pipeline.finetune.classification_input import lay_out
from data_pipeline.finetune.records import (
    OPTION_PREFIX,
    TaskDataError,
    batch_indices,
    bucket_lengths,
    read_records,
    read_text_file,
    tokenize_texts,
)
from data_pipeline.finetune.retrieval_config import COLLECTION, RetrievalConfig, from_config


@dataclasses.dataclass(frozen=True, eq=False)
class Pairs:
    source: str
    queries: list[str]
    passages: list[list[str]]  # [N][P]: the positive, then the hard negatives
    margins: np.ndarray | None = None  # float32 [N, P - 1]: the teacher's, for Margin-MSE

    def __len__(self) -> int:
        return len(self.queries)


@dataclasses.dataclass(frozen=True, eq=False)
class Collection:
    source: str
    query_ids: list[str]
    queries: list[str]
    passage_ids: list[str]
    passages: list[str]
    qrels: dict[str, dict[str, int]]  # query id -> {passage id: relevance}


@dataclasses.dataclass(frozen=True, eq=False)
class RetrievalTask:
    config: RetrievalConfig
    train: Pairs | None
    eval: Collection | None


def load_retrieval_task(data_config: Any, *, margins: bool = False) -> RetrievalTask:
    """Reads and checks the configured splits; a problem names its file and line. With
    `margins`, the training rows carry their teacher's margins (the module docstring)."""
    config = from_config(data_config)
    if margins and config.train_file and not config.margins:
        fail("margins", (), "Margin-MSE reads a teacher's margin per negatives column: name them")
    if margins and config.beir_dir and not config.negatives_file:
        fail(
            "negatives_file", "",
            "Margin-MSE reads a teacher's margins: python -m bertjax.retrieval mine "
            "--scorer RERANKER writes them",
        )  # fmt: skip
    if config.beir_dir:
        return _load_beir(config, margins)
    rows = {
        split: _read_pairs(config, path, f"{split}_file", margins=margins and split == "train")
        for split, path in (("train", config.train_file), ("eval", config.eval_file))
        if path
    }
    if config.texts:
        rows["train"] = _text_rows(config.texts, read_texts(config.texts))
    evaluated = rows.get("eval")
    return RetrievalTask(config, rows.get("train"), evaluated and _collection(evaluated))


def load_collection(beir_dir: str, split: str) -> Collection:
    """A BEIR directory's collection for `split` (qrels/<split>.tsv), checked as a run's."""
    config = RetrievalConfig(beir_dir=beir_dir, train_split="", eval_split=split)
    return _load_beir(config, margins=False).eval


# ----------------------------------------------------------------------------- reading


def _read_pairs(config: RetrievalConfig, path: str, option: str, *, margins: bool) -> Pairs:
    columns = [("anchor", config.anchor), ("positive", config.positive)]
    columns += [("negatives", name) for name in config.negatives]
    texts_end = len(columns)
    if margins:
        columns += [("margins", name) for name in config.margins]
    queries, passages, margins_read = [], [], []
    for line, values in read_records(path, columns, option):
        named = [(name, v) for (_, name), v in zip(columns, values, strict=True)]
        texts = [checked_text(path, line, name, v) for name, v in named[:texts_end]]
        queries.append(texts[0])
        passages.append(texts[1:])
        margins_read.append([_margin(path, line, name, v) for name, v in named[texts_end:]])
    if not queries:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}{option}): no pairs")
    return Pairs(path, queries, passages, np.asarray(margins_read, np.float32) if margins else None)


def read_texts(path: str) -> list[str]:
    """A texts file's texts: a .txt file's lines, blank ones skipped, or the "text" column
    of a TSV, CSV or JSONL file."""
    if path.lower().endswith(".txt"):
        lines = read_text_file(path, "texts").split("\n")
        texts = [line.removesuffix("\r") for line in lines if line.strip()]
    else:
        texts = [
            checked_text(path, line, "text", value)
            for line, (value,) in read_records(path, [("texts", "text")], "texts")
        ]
    if not texts:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}texts): no texts")
    return texts


def _text_rows(source: str, texts: list[str]) -> Pairs:
    """Texts two to a row, the query's slot and the passage's; an odd count's last row
    repeats the first text."""
    if len(texts) % 2:
        texts = [*texts, texts[0]]
    return Pairs(source, texts[0::2], [[text] for text in texts[1::2]])


def _margin(path, line, column, value) -> float:
    try:
        margin = float(value)
    except (TypeError, ValueError):
        margin = float("nan")
    if isinstance(value, bool) or not np.isfinite(margin):
        raise TaskDataError(f"{path}: line {line}: {column!r} is {value!r}, not a finite number")
    return margin


def _collection(pairs: Pairs) -> Collection:
    """A pair file as a collection: distinct anchors and passages, ids in order of first
    appearance; each anchor's positives relevant (1)."""
    query_ids, passage_ids = {}, {}
    qrels = {}
    for query, passages in zip(pairs.queries, pairs.passages, strict=True):
        qid = query_ids.setdefault(query, f"q{len(query_ids)}")
        for passage in passages:
            passage_ids.setdefault(passage, f"d{len(passage_ids)}")
        qrels.setdefault(qid, {})[passage_ids[passages[0]]] = 1
    return Collection(
        pairs.source, list(query_ids.values()), list(query_ids),
        list(passage_ids.values()), list(passage_ids), qrels,
    )  # fmt: skip


def train_files(config) -> tuple[str, ...]:
    """The files the train split is read from, in order: train_file, or the BEIR
    directory's corpus, queries and train_split's qrels, then negatives_file if given; or
    a texts file (of a RetrievalConfig, or any config with those options: the reranking
    task's)."""
    texts = getattr(config, "texts", "")
    if texts and texts != COLLECTION:
        return (texts,)
    if config.train_file:
        return (config.train_file,)
    if not config.train_split:
        return ()
    directory = config.beir_dir
    return (
        os.path.join(directory, "corpus.jsonl"),
        os.path.join(directory, "queries.jsonl"),
        os.path.join(directory, "qrels", f"{config.train_split}.tsv"),
        *((config.negatives_file,) if config.negatives_file else ()),
    )


def _load_beir(config: RetrievalConfig, margins: bool) -> RetrievalTask:
    directory = config.beir_dir
    corpus, queries = read_beir(directory)
    train = evaluated = None
    if config.texts and config.texts != COLLECTION:
        train = _text_rows(config.texts, read_texts(config.texts))
    elif config.train_split:
        qrels = read_qrels(directory, config.train_split, queries, corpus, "train_split")
        train = (
            _text_rows(directory, [queries[q] for q in qrels] + list(corpus.values()))
            if config.texts
            else _beir_pairs(config, qrels, queries, corpus, margins)
        )
    if config.eval_split:
        qrels = read_qrels(directory, config.eval_split, queries, corpus, "eval_split")
        asked = [q for q in queries if q in qrels]
        evaluated = Collection(
            directory, asked, [queries[q] for q in asked], list(corpus), list(corpus.values()),
            qrels,
        )  # fmt: skip
    return RetrievalTask(config, train, evaluated)


def _beir_pairs(config: RetrievalConfig, qrels, queries, corpus, margins: bool) -> Pairs:
    """A row per relevant judgment of the train split: its query and passage, then the
    first num_negatives negatives of the query's line in negatives_file, if any."""
    pairs = [(q, d) for q, judged in qrels.items() for d, score in judged.items() if score > 0]
    if not pairs:
        fail("train_split", config.train_split, "its qrels judge no passage relevant")
    path, lines = config.negatives_file, {}
    if path:
        lines = mined.read(path, "negatives_file", qrels, config.train_split, queries, corpus)
    count = config.num_negatives if path else 0
    passages, margins_read = [], []
    for q, d in pairs:
        line = lines.get(q, mined.Line([]))
        if len(line.negatives) < count:
            raise TaskDataError(
                f"{path} ({OPTION_PREFIX}negatives_file): query {q!r} has "
                f"{len(line.negatives)} negatives, fewer than num_negatives={count} (mine "
                "more, or lower num_negatives)"
            )
        passages.append([corpus[p] for p in [d, *line.negatives[:count]]])
        if margins:
            margins_read.append(_mined_margins(path, q, d, line, count))
    margins_array = np.asarray(margins_read, np.float32).reshape(-1, count) if margins else None
    return Pairs(config.beir_dir, [queries[q] for q, _ in pairs], passages, margins_array)


def _mined_margins(path: str, query: str, positive: str, line, count: int) -> list[float]:
    """The scorer's score of `positive` less its score of each of the first negatives."""
    if line.scorer_scores is None:
        raise TaskDataError(
            f"{path} ({OPTION_PREFIX}negatives_file): query {query!r} has no scorer scores; "
            "Margin-MSE reads them: mine with --scorer RERANKER"
        )
    if positive not in line.scorer_positives:
        raise TaskDataError(
            f'{path} ({OPTION_PREFIX}negatives_file): query {query!r}: "scorer_positives" '
            f"lacks its relevant passage {positive!r}"
        )
    top = line.scorer_positives[positive]
    return [top - score for score in line.scorer_scores[:count]]


def read_beir(directory: str) -> tuple[dict[str, str], dict[str, str]]:
    """A BEIR directory's corpus and queries, each id -> text."""
    corpus = _jsonl_texts(os.path.join(directory, "corpus.jsonl"), title=True)
    return corpus, _jsonl_texts(os.path.join(directory, "queries.jsonl"), title=False)


def _jsonl_texts(path: str, *, title: bool) -> dict[str, str]:
    """id -> text of a BEIR corpus.jsonl (its title, if any, and text) or queries.jsonl."""
    texts = {}
    for line, raw in enumerate(read_text_file(path, "beir_dir").split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}: line {line} is not valid JSON ({e.msg})") from None
        if not isinstance(record, dict) or "_id" not in record or "text" not in record:
            raise TaskDataError(f'{path}: line {line}: expected an object with "_id" and "text"')
        key = str(record["_id"])
        if key in texts:
            raise TaskDataError(f"{path}: line {line}: duplicate _id {key!r}")
        parts = [record.get("title") or "", record["text"]] if title else [record["text"]]
        parts = [checked_text(path, line, "text", part, empty_ok=True) for part in parts]
        text = " ".join(part for part in parts if part)
        if not text.strip():
            raise TaskDataError(f"{path}: line {line}: _id {key!r} has an empty text")
        texts[key] = text
    if not texts:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}beir_dir): empty")
    return texts


def read_qrels(directory, split, queries, corpus, option) -> dict[str, dict[str, int]]:
    """qrels/<split>.tsv: query id -> {passage id: score}, every id known (`option` is the
    config.data option that named the split)."""
    path = os.path.join(directory, "qrels", f"{split}.tsv")
    columns = [(option, "query-id"), (option, "corpus-id"), (option, "score")]
    qrels = {}
    for line, (query, passage, score) in read_records(path, columns, option):
        for key, known, what in ((query, queries, "queries.jsonl"), (passage, corpus, "corpus")):
            if key not in known:
                raise TaskDataError(f"{path}: line {line}: {key!r} is not in {what}")
        try:
            qrels.setdefault(query, {})[passage] = int(score)
        except ValueError:
            raise TaskDataError(f"{path}: line {line}: score {score!r} is not an integer") from None
    if not qrels:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}{option}): no judgments")
    return qrels


def checked_text(path, line, column, value, *, empty_ok=False) -> str:
    if not isinstance(value, str):
        raise TaskDataError(
            f"{path}: line {line}: {column!r} is {type(value).__name__} {value!r}, not text"
        )
    if not value.strip() and not empty_ok:
        raise TaskDataError(f"{path}: line {line}: {column!r} is empty")
    return value


# ----------------------------------------------------------------------------- batches


def make_retrieval_dataset(
    task: RetrievalTask,
    tokenizer,
    *,
    split: str,
    in_order: bool = False,
    teacher: tuple[np.ndarray, ...] | None = None,
    **batching,
) -> tuple[tf.data.Dataset, records.SplitInfo]:
    """This host's batches of `split` ('train' or 'eval'), as the module docstring says.
    `batching` is records.batch_indices' keyword arguments. Of the training rows,
    `in_order` gives each row once, in order, with its `row_index` (-1 on padding rows),
    for a teacher to compute its outputs of; `teacher` (those outputs, each [rows, ...])
    adds them to each batch as a "teacher" column, a tuple."""
    config = task.config
    texts = records.task_split(task, split)
    if split == "train":
        queries, passages = texts.queries, [passage for row in texts.passages for passage in row]
        width = len(texts.passages[0])
    else:
        queries, passages = texts.queries, texts.passages
        width = config.passages_per_row
    query_length = config.train_query_length if split == "train" else config.max_query_length
    query_side = _Side(tokenizer, queries, query_length, config.length_buckets)
    passage_side = _Side(tokenizer, passages, config.max_seq_length, config.length_buckets)
    layout = functools.partial(_features, query_side, passage_side, width, tokenizer.vocab)
    rows = batching["batch_size"]
    if split == "train":
        count = len(queries)
        query_keys, passage_keys = tf.constant(_keys(queries)), tf.constant(_keys(passages))
        margins = None if texts.margins is None else tf.constant(texts.margins)
        buckets = (query_side.bucket, passage_side.bucket.reshape(count, width).max(axis=1))
        indices, info = batch_indices(count, training=not in_order, buckets=buckets, **batching)
        outputs = None if teacher is None else tuple(tf.constant(x) for x in teacher)

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight, *rest):
            *position, query_bucket, passage_bucket = rest
            slots = index[:, None] * width + tf.range(width)[None, :]
            batch = layout(index, slots, query_bucket, passage_bucket)
            batch["query_key"] = tf.gather(query_keys, index)
            batch["passage_keys"] = tf.gather(passage_keys, slots)
            batch["example_weight"] = weight
            if margins is not None:
                batch["teacher_margins"] = tf.gather(margins, index)
            if in_order:
                batch[records.ROW_INDEX] = tf.where(weight > 0, index, -1)
            batch = records.finish_batch(batch, tuple(position), batch_size=rows, rows=rows)
            if outputs is not None:
                batch["teacher"] = tuple(tf.gather(x, index) for x in outputs)
            return batch

    else:
        count = max(len(queries), -(-len(passages) // width))
        query_rows = np.minimum(np.arange(count), len(queries) - 1)
        slots = np.arange(count * width).reshape(count, width)
        passage_slots = np.minimum(slots, len(passages) - 1)
        buckets = (query_side.bucket[query_rows], passage_side.bucket[passage_slots].max(axis=1))
        indices, info = batch_indices(count, training=False, buckets=buckets, **batching)

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight, query_bucket, passage_bucket):
            slots = index[:, None] * width + tf.range(width)[None, :]
            batch = layout(
                tf.minimum(index, len(queries) - 1),
                tf.minimum(slots, len(passages) - 1),
                query_bucket,
                passage_bucket,
            )
            real = weight > 0
            batch["query_index"] = tf.where(real & (index < len(queries)), index, -1)
            batch["passage_index"] = tf.where(real[:, None] & (slots < len(passages)), slots, -1)
            batch["example_weight"] = weight
            return records.finish_batch(batch, (), batch_size=rows, rows=rows)

    return indices.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2), info


class _Side:
    """The queries' or the passages' word pieces (tokenized once here; the batches only
    gather), their bucket lengths, and the bucket of each text."""

    def __init__(self, tokenizer, texts: list[str], length: int, buckets: int):
        flat, splits = tokenize_texts(tokenizer, texts)
        self.pieces = tf.RaggedTensor.from_row_splits(flat, splits)
        self.max_length = length
        self.lengths = bucket_lengths(length, buckets)
        tokens = np.minimum(np.diff(splits) + 2, length)  # with [CLS] and [SEP]
        self.bucket = np.searchsorted(self.lengths, tokens).astype(np.int32)

    def lay_out(self, rows: tf.Tensor, bucket: tf.Tensor, vocab) -> dict[str, tf.Tensor]:
        """[CLS] pieces [SEP] of the texts at `rows` (any shape), cut to the maximum and
        padded to the bucket's length: ids and mask [*rows.shape, length]."""
        pieces = tf.gather(self.pieces, tf.reshape(rows, [-1]))
        nothing = tf.RaggedTensor.from_row_lengths(
            tf.zeros([0], pieces.dtype), tf.zeros([pieces.nrows()], tf.int64)
        )
        laid = lay_out(
            pieces, nothing, tf.zeros([pieces.nrows()], tf.bool), max_seq_length=self.max_length,
            cls_id=vocab.cls_id, sep_id=vocab.sep_id, pad_id=vocab.pad_id,
        )  # fmt: skip
        length = tf.gather(self.lengths, bucket)
        shape = tf.concat([tf.shape(rows), [length]], axis=0)
        return {
            name: tf.reshape(laid[key][:, :length], shape)
            for name, key in (("ids", "input_ids"), ("mask", "input_mask"))
        }


def _features(query_side, passage_side, width, vocab, queries, slots, query_bucket, passage_bucket):
    """The model's inputs: row i's query, and its passages (`slots` [B, width]) side by
    side, [B, width * length]."""
    query = query_side.lay_out(queries, query_bucket, vocab)
    passage = passage_side.lay_out(slots, passage_bucket, vocab)
    shape = [tf.shape(slots)[0], -1]
    return {
        "query_ids": query["ids"],
        "query_mask": query["mask"],
        "passage_ids": tf.reshape(passage["ids"], shape),
        "passage_mask": tf.reshape(passage["mask"], shape),
    }


def _keys(texts: list[str]) -> np.ndarray:
    """int32 [N]: the same number for the same text."""
    return np.unique(np.asarray(texts, object), return_inverse=True)[1].astype(np.int32)
