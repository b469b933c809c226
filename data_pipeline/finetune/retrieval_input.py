"""The retrieval task's input: (query, positive passage[, hard negatives]) pairs to train an
embedder on, and a collection (queries, corpus, relevance judgments) to evaluate it on.

Two sources:

    beir_dir     a BEIR-layout directory: corpus.jsonl ({"_id", "title", "text"}; a
                 passage is its title and text joined by a space, as BEIR embeds it),
                 queries.jsonl ({"_id", "text"}), qrels/<split>.tsv (query-id,
                 corpus-id, score with a header). Training pairs are train_split's
                 judgments above 0; evaluation is eval_split's.
    train_file   TSV, CSV or JSONL rows of named columns: `anchor`, `positive` and the
    eval_file    `negatives` columns, each a text. Evaluated as a collection: the
                 anchors are the queries, the distinct positive and negative texts
                 the corpus, each anchor's positives its relevant passages.

A text is read as `[CLS] text [SEP]`, cut to max_query_length (queries) or
max_seq_length (passages) tokens; every batch has those static shapes.

Training batches (records.batch_indices draws them, so they resume mid-epoch):

    query_ids, query_mask          int32 [B, max_query_length]
    passage_ids, passage_mask      int32 [B, P * max_seq_length]: the positive, then
                                   each hard negative (P = 1 + negatives)
    query_key                      int32 [B]: equal for the same query text
    passage_keys                   int32 [B, P]: equal for the same passage text
    example_weight                 float32 [B], 1
    stream_position                int64 [B, 1]

The keys let the loss see that another row's positive is this row's positive too,
not a negative. Evaluation batches hold query i and passage i of the collection
side by side in row i (P = 1), with `query_index` and `passage_index` (-1 past the
end of either list) and example_weight 0 on rows past the longer list.
"""

import dataclasses
import json
import os
from typing import Any

import ml_collections
import numpy as np
import tensorflow as tf

from data_pipeline import config as config_lib
from data_pipeline.config import fail
from data_pipeline.finetune import records
from data_pipeline.finetune.classification_input import lay_out
from data_pipeline.finetune.records import (
    FILE_FORMATS,
    OPTION_PREFIX,
    TaskDataError,
    batch_indices,
    read_records,
    read_text_file,
    task_config,
    tokenize_texts,
)


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    # A BEIR-layout directory (local or gs://), or the files below.
    beir_dir: str = ""
    train_split: str = "train"  # qrels/<train_split>.tsv; "" trains nothing
    eval_split: str = "dev"  # qrels/<eval_split>.tsv; "" evaluates nothing
    train_file: str = ""
    eval_file: str = ""
    # The files' columns: the query, its relevant passage, and hard negatives.
    anchor: str = "anchor"
    positive: str = "positive"
    negatives: tuple[str, ...] = ()
    max_query_length: int = 64
    max_seq_length: int = 256  # of passages

    def __post_init__(self):
        if bool(self.beir_dir) == bool(self.train_file or self.eval_file):
            fail("beir_dir", self.beir_dir, "give beir_dir, or train_file and/or eval_file")
        for option in ("train_file", "eval_file"):
            path = getattr(self, option)
            if path and os.path.splitext(path)[1].lower() not in FILE_FORMATS:
                fail(option, path, f"the extension must be one of {', '.join(FILE_FORMATS)}")
        if self.beir_dir and not (self.train_split or self.eval_split):
            fail("train_split", "", "beir_dir needs train_split, eval_split or both")
        columns = [self.anchor, self.positive, *self.negatives]
        if not all(columns):
            fail("negatives" if all(columns[:2]) else "anchor", columns, "must name columns")
        if len(set(columns)) != len(columns):
            fail("negatives", self.negatives, "each column once: anchor, positive, negatives")
        for option in ("max_query_length", "max_seq_length"):
            if getattr(self, option) < 3:
                fail(option, getattr(self, option), "must be at least 3 ([CLS] text [SEP])")


def default_config() -> ml_collections.ConfigDict:
    return config_lib.config_dict(RetrievalConfig)


def from_config(data_config: Any) -> RetrievalConfig:
    return task_config(RetrievalConfig, data_config)


@dataclasses.dataclass(frozen=True, eq=False)
class Pairs:
    source: str
    queries: list[str]
    passages: list[list[str]]  # [N][P]: the positive, then the hard negatives

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


def load_retrieval_task(data_config: Any) -> RetrievalTask:
    """Reads and checks the configured splits; a problem names its file and line."""
    config = from_config(data_config)
    if config.beir_dir:
        return _load_beir(config)
    rows = {
        split: _read_pairs(config, path, f"{split}_file")
        for split, path in (("train", config.train_file), ("eval", config.eval_file))
        if path
    }
    evaluated = rows.get("eval")
    return RetrievalTask(config, rows.get("train"), evaluated and _collection(evaluated))


def load_collection(beir_dir: str, split: str) -> Collection:
    """A BEIR directory's collection for `split` (qrels/<split>.tsv), checked as a run's."""
    config = RetrievalConfig(beir_dir=beir_dir, train_split="", eval_split=split)
    return _load_beir(config).eval


# ----------------------------------------------------------------------------- reading


def _read_pairs(config: RetrievalConfig, path: str, option: str) -> Pairs:
    columns = [("anchor", config.anchor), ("positive", config.positive)]
    columns += [("negatives", name) for name in config.negatives]
    queries, passages = [], []
    for line, values in read_records(path, columns, option):
        texts = [_text(path, line, name, v) for (_, name), v in zip(columns, values, strict=True)]
        queries.append(texts[0])
        passages.append(texts[1:])
    if not queries:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}{option}): no pairs")
    return Pairs(path, queries, passages)


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


def _load_beir(config: RetrievalConfig) -> RetrievalTask:
    directory = config.beir_dir
    corpus = _jsonl_texts(os.path.join(directory, "corpus.jsonl"), title=True)
    queries = _jsonl_texts(os.path.join(directory, "queries.jsonl"), title=False)
    train = evaluated = None
    if config.train_split:
        qrels = _qrels(directory, config.train_split, queries, corpus, "train_split")
        pairs = [(q, d) for q, judged in qrels.items() for d, score in judged.items() if score > 0]
        if not pairs:
            fail("train_split", config.train_split, "its qrels judge no passage relevant")
        train = Pairs(directory, [queries[q] for q, _ in pairs], [[corpus[d]] for _, d in pairs])
    if config.eval_split:
        qrels = _qrels(directory, config.eval_split, queries, corpus, "eval_split")
        asked = [q for q in queries if q in qrels]
        evaluated = Collection(
            directory, asked, [queries[q] for q in asked], list(corpus), list(corpus.values()),
            qrels,
        )  # fmt: skip
    return RetrievalTask(config, train, evaluated)


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
        parts = [_text(path, line, "text", part, empty_ok=True) for part in parts]
        text = " ".join(part for part in parts if part)
        if not text.strip():
            raise TaskDataError(f"{path}: line {line}: _id {key!r} has an empty text")
        texts[key] = text
    if not texts:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}beir_dir): empty")
    return texts


def _qrels(directory, split, queries, corpus, option) -> dict[str, dict[str, int]]:
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


def _text(path, line, column, value, *, empty_ok=False) -> str:
    if not isinstance(value, str):
        raise TaskDataError(
            f"{path}: line {line}: {column!r} is {type(value).__name__} {value!r}, not text"
        )
    if not value.strip() and not empty_ok:
        raise TaskDataError(f"{path}: line {line}: {column!r} is empty")
    return value


# ----------------------------------------------------------------------------- batches


def make_retrieval_dataset(
    task: RetrievalTask, tokenizer, *, split: str, **batching
) -> tuple[tf.data.Dataset, records.SplitInfo]:
    """This host's batches of `split` ('train' or 'eval'), as the module docstring says.
    `batching` is records.batch_indices' keyword arguments."""
    config, vocab = task.config, tokenizer.vocab
    if split == "train":
        pairs = records.task_split(task, split)
        count, width = len(pairs), len(pairs.passages[0])
        flat = [passage for row in pairs.passages for passage in row]
        query_pieces, passage_pieces = _pieces(tokenizer, pairs.queries), _pieces(tokenizer, flat)
        query_keys = tf.constant(_keys(pairs.queries))
        passage_keys = tf.constant(_keys(flat).reshape(count, width))
        indices, info = batch_indices(count, training=True, **batching)

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight, position):
            slots = tf.reshape(index[:, None] * width + tf.range(width)[None, :], [-1])
            query = _lay_out(tf.gather(query_pieces, index), config.max_query_length, vocab)
            passage = _lay_out(tf.gather(passage_pieces, slots), config.max_seq_length, vocab)
            batch = _features(query, passage, width)
            batch["query_key"] = tf.gather(query_keys, index)
            batch["passage_keys"] = tf.gather(passage_keys, index)
            batch["example_weight"] = weight
            rows = batching["batch_size"]
            return records.finish_batch(batch, (position,), batch_size=rows, rows=rows)

    else:
        collection = records.task_split(task, split)
        queries, passages = len(collection.queries), len(collection.passages)
        query_pieces = _pieces(tokenizer, collection.queries)
        passage_pieces = _pieces(tokenizer, collection.passages)
        indices, info = batch_indices(max(queries, passages), training=False, **batching)

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight):
            query = tf.gather(query_pieces, tf.minimum(index, queries - 1))
            passage = tf.gather(passage_pieces, tf.minimum(index, passages - 1))
            batch = _features(
                _lay_out(query, config.max_query_length, vocab),
                _lay_out(passage, config.max_seq_length, vocab),
                1,
            )
            real = weight > 0
            batch["query_index"] = tf.where(real & (index < queries), index, -1)
            batch["passage_index"] = tf.where(real & (index < passages), index, -1)
            batch["example_weight"] = weight
            rows = batching["batch_size"]
            return records.finish_batch(batch, (), batch_size=rows, rows=rows)

    return indices.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2), info


def _pieces(tokenizer, texts: list[str]) -> tf.RaggedTensor:
    """Each text's word pieces, tokenized once here (the batches only gather)."""
    return tf.RaggedTensor.from_row_splits(*tokenize_texts(tokenizer, texts))


def _keys(texts: list[str]) -> np.ndarray:
    """int32 [N]: the same number for the same text."""
    return np.unique(np.asarray(texts, object), return_inverse=True)[1].astype(np.int32)


def _lay_out(pieces: tf.RaggedTensor, length: int, vocab) -> dict[str, tf.Tensor]:
    """[CLS] pieces [SEP] per row, cut to `length` tokens and padded to it."""
    rows = pieces.nrows()
    nothing = tf.RaggedTensor.from_row_lengths(
        tf.zeros([0], pieces.dtype), tf.zeros([rows], tf.int64)
    )
    laid = lay_out(
        pieces, nothing, tf.zeros([rows], tf.bool), max_seq_length=length,
        cls_id=vocab.cls_id, sep_id=vocab.sep_id, pad_id=vocab.pad_id,
    )  # fmt: skip
    return {"ids": laid["input_ids"], "mask": laid["input_mask"]}


def _features(query: dict, passage: dict, width: int) -> dict[str, tf.Tensor]:
    """The model's inputs: the passages of a row side by side, [B, width * length]."""
    shape = [tf.shape(query["ids"])[0], width * passage["ids"].shape[1]]
    return {
        "query_ids": query["ids"],
        "query_mask": query["mask"],
        "passage_ids": tf.reshape(passage["ids"], shape),
        "passage_mask": tf.reshape(passage["mask"], shape),
    }
