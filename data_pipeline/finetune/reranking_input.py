"""The reranking task's input: groups of a query and its candidate passages to train a
cross-encoder on, and held-out queries with the passages to rerank.

The sources are reranking_config.py's:

    beir_dir        groups from train_split's judgments above 0, one each: the query,
    negatives_file  that relevant passage, then the first num_negatives passages of
                    the query's line in negatives_file ({"query_id", "negatives"}: the
                    mining tool's file, mined.py).
                    The held-out queries are eval_split's, each reranked among its
                    judged passages and the passages of its line in
                    eval_negatives_file (all of them).
    train_file      a group per row (`query`, `positive`, each `negatives` column), or
    eval_file       with `passage` set, a (query, passage, label) pair per row. Held
                    out: each distinct query among the passages its rows give it, a
                    positive (or a label of at least 0.5) relevant.

Every problem names its file and line: a negatives file's (mined.py), a label outside
[0, 1].

A pair is read as `[CLS] query [SEP] passage [SEP]`, segments 0 then 1: the query cut to
max_query_length word pieces first, then the pair to max_seq_length tokens
(classification_input.lay_out's rule: it cuts the longer side, so the passage gives way
while the query is the shorter). A batch pads its pairs to the shortest of a few lengths
that holds its longest pair (`length_buckets`: records.bucket_lengths), chosen over the
whole global batch so that every process pads alike: a run compiles at most one program
per length.

Training batches (records.batch_indices draws them, so they resume mid-epoch), G the
group size (reranking_config.RerankingConfig.group_size):

    input_ids, input_mask, segment_ids   int32 [B, G * L]: a group's pairs side by side
    labels                               float32 [B, G]: 1 relevant, 0 not (a pair's
                                         label may be a grade in between)
    candidate_weight                     float32 [B, G]: 0 past a group's last candidate
                                         (a query with fewer negatives than G - 1)
    example_weight                       float32 [B], 1
    stream_position                      int64 [B, 1]

Evaluation batches lay the held-out pairs out in order, G to a row, with
`query_index` and `passage_index` int32 [B, G] (-1 past the last pair) and the same
candidate_weight and example_weight (0 on rows past it).
"""

import dataclasses
import functools
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
    tokenize_texts,
)
from data_pipeline.finetune.reranking_config import RerankingConfig, from_config
from data_pipeline.finetune.retrieval_input import checked_text, read_beir, read_qrels

# The model's inputs, in the order it takes them.
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
# A pair's label at or above this is relevant, when held-out pairs become judgments.
RELEVANT = 0.5


@dataclasses.dataclass(frozen=True, eq=False)
class Groups:
    """Training groups: a query and its candidates, the relevant one first."""

    source: str
    queries: list[str]  # distinct texts
    passages: list[str]  # distinct texts
    query: np.ndarray  # int32 [N]: each group's query, an index into `queries`
    candidates: np.ndarray  # int32 [N, G]: indices into `passages`, -1 past the group's end
    labels: np.ndarray  # float32 [N, G]

    def __len__(self) -> int:
        return len(self.query)


@dataclasses.dataclass(frozen=True, eq=False)
class Candidates:
    """Held-out queries, the passages each is reranked among, and their judgments."""

    source: str
    query_ids: list[str]
    queries: list[str]
    passage_ids: list[str]
    passages: list[str]
    pairs: np.ndarray  # int32 [M, 2]: (query, passage) indices, a query's pairs together
    qrels: dict[str, dict[str, int]]  # query id -> {passage id: relevance}


@dataclasses.dataclass(frozen=True, eq=False)
class RerankingTask:
    config: RerankingConfig
    train: Groups | None
    eval: Candidates | None


def load_reranking_task(data_config: Any) -> RerankingTask:
    """Reads and checks the configured splits; a problem names its file and line."""
    config = from_config(data_config)
    if config.beir_dir:
        return _load_beir(config)
    train = eval_ = None
    if config.train_file:
        train = _groups_of_rows(config, _read_rows(config, config.train_file, "train_file"))
    if config.eval_file:
        eval_ = _candidates_of_rows(config, _read_rows(config, config.eval_file, "eval_file"))
    return RerankingTask(config, train, eval_)


# ----------------------------------------------------------------------------- reading


class _Index:
    """Distinct keys in order of first appearance, each with its number."""

    def __init__(self):
        self.numbers: dict[str, int] = {}

    def __call__(self, key: str) -> int:
        return self.numbers.setdefault(key, len(self.numbers))

    @property
    def keys(self) -> list[str]:
        return list(self.numbers)


def _load_beir(config: RerankingConfig) -> RerankingTask:
    directory = config.beir_dir
    corpus, queries = read_beir(directory)
    train = eval_ = None
    if config.train_split:
        qrels = read_qrels(directory, config.train_split, queries, corpus, "train_split")
        negatives = _negatives(
            config.negatives_file, "negatives_file", qrels, config.train_split, queries, corpus
        )
        train = _beir_groups(config, qrels, negatives, queries, corpus)
    if config.eval_split:
        qrels = read_qrels(directory, config.eval_split, queries, corpus, "eval_split")
        negatives = {}
        if config.eval_negatives_file:
            negatives = _negatives(
                config.eval_negatives_file, "eval_negatives_file", qrels, config.eval_split,
                queries, corpus,
            )  # fmt: skip
        pools = {q: [*judged, *negatives.get(q, ())] for q, judged in qrels.items()}
        eval_ = _candidates(directory, pools, qrels, queries, corpus)
        _check_rerankable(
            eval_, "eval_split", config.eval_split,
            f"give eval_negatives_file (python -m bertjax.retrieval mine --split "
            f"{config.eval_split}), or eval_split=''",
        )  # fmt: skip
    return RerankingTask(config, train, eval_)


def _check_rerankable(candidates: "Candidates", option: str, value, remedy: str) -> None:
    """Every held-out query has a candidate that is not relevant: one that has only its
    relevant passages scores nDCG@10 1 whatever the model."""
    mixed = {
        candidates.query_ids[q]
        for q, d in candidates.pairs
        if candidates.qrels[candidates.query_ids[q]].get(candidates.passage_ids[d], 0) <= 0
    }
    alone = [q for q in candidates.query_ids if q not in mixed]
    if alone:
        fail(
            option,
            value,
            f"{len(alone)} of its {len(candidates.query_ids)} queries (the first {alone[0]!r}) "
            f"have no candidate but their relevant passages (nDCG@10 1 whatever the model): "
            f"{remedy}",
        )


def _negatives(path, option, qrels, split, queries, corpus) -> dict[str, list[str]]:
    """query id -> its negatives' passage ids, from the mining tool's file (mined.read)."""
    lines = mined.read(path, option, qrels, split, queries, corpus)
    return {query: line.negatives for query, line in lines.items()}


def _beir_groups(config, qrels, negatives, queries, corpus) -> Groups:
    """A group per relevant judgment: its passage, then the query's first negatives."""
    width = config.group_size
    query_index, passage_index = _Index(), _Index()
    query, candidates, labels = [], [], []
    for q, judged in qrels.items():
        for d, score in judged.items():
            if score <= 0:
                continue
            chosen = [d, *negatives[q][: width - 1]]
            query.append(query_index(q))
            candidates.append([passage_index(p) for p in chosen] + [-1] * (width - len(chosen)))
            labels.append([1.0] + [0.0] * (width - 1))
    return Groups(
        config.beir_dir,
        [queries[q] for q in query_index.keys],
        [corpus[d] for d in passage_index.keys],
        np.asarray(query, np.int32),
        np.asarray(candidates, np.int32).reshape(-1, width),
        np.asarray(labels, np.float32).reshape(-1, width),
    )


def _candidates(source, pools, qrels, queries, corpus) -> Candidates:
    """Each query of `pools` (id -> passage ids) with its passages, in order."""
    passage_index = _Index()
    pairs = [(i, passage_index(d)) for i, q in enumerate(pools) for d in dict.fromkeys(pools[q])]
    return Candidates(
        source,
        list(pools),
        [queries[q] for q in pools],
        passage_index.keys,
        [corpus[d] for d in passage_index.keys],
        np.asarray(pairs, np.int32).reshape(-1, 2),
        qrels,
    )


@dataclasses.dataclass
class _Rows:
    path: str
    lines: list[int]
    queries: list[str]
    passages: list[list[str]]  # a group's candidates, the positive first; or one passage
    labels: list[float]  # of pairs; [] for groups


def _read_rows(config: RerankingConfig, path: str, option: str) -> _Rows:
    named = ("query", "passage", "label") if config.pairs else ("query", "positive")
    columns = [(name, getattr(config, name)) for name in named]
    columns += [("negatives", name) for name in config.negatives]
    rows = _Rows(path, [], [], [], [])
    for line, values in read_records(path, columns, option):
        texts = dict(zip([name for _, name in columns], values, strict=True))
        rows.lines.append(line)
        rows.queries.append(checked_text(path, line, config.query, texts.pop(config.query)))
        if config.pairs:
            rows.labels.append(_label(path, line, config.label, texts.pop(config.label)))
        rows.passages.append([checked_text(path, line, name, v) for name, v in texts.items()])
    if not rows.lines:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}{option}): no rows")
    return rows


def _label(path, line, column, value) -> float:
    try:
        label = float(value)
    except (TypeError, ValueError):
        label = None
    if label is None or not 0.0 <= label <= 1.0:
        raise TaskDataError(
            f"{path}: line {line}: {column!r} is {value!r}: a label is 1 (relevant), 0 (not) "
            "or a grade between"
        )
    return label


def _check_labels(config: RerankingConfig, rows: _Rows) -> None:
    """No passage is relevant to a query in one row and not in another (or a negative of
    its own row's query)."""
    seen: dict[tuple[str, str], tuple[bool, int]] = {}
    for i, (query, passages) in enumerate(zip(rows.queries, rows.passages, strict=True)):
        relevant = (
            [rows.labels[i] >= RELEVANT] if config.pairs else [True] + [False] * (len(passages) - 1)
        )
        for passage, is_relevant in zip(passages, relevant, strict=True):
            before = seen.setdefault((query, passage), (is_relevant, rows.lines[i]))
            if before[0] != is_relevant:
                raise TaskDataError(
                    f"{rows.path}: line {rows.lines[i]}: the passage {passage[:40]!r} is "
                    f"{'relevant' if is_relevant else 'not relevant'} to the query "
                    f"{query[:40]!r} here and {'relevant' if before[0] else 'not'} at line "
                    f"{before[1]}"
                )


def _groups_of_rows(config: RerankingConfig, rows: _Rows) -> Groups:
    _check_labels(config, rows)
    query_index, passage_index = _Index(), _Index()
    width = config.group_size
    labels = (
        np.asarray(rows.labels, np.float32)[:, None]
        if config.pairs
        else np.tile(np.asarray([1.0] + [0.0] * (width - 1), np.float32), (len(rows.lines), 1))
    )
    return Groups(
        rows.path,
        *_texts_of(rows, query_index, passage_index),
        np.asarray([query_index(q) for q in rows.queries], np.int32),
        np.asarray([[passage_index(p) for p in row] for row in rows.passages], np.int32),
        labels,
    )


def _texts_of(rows: _Rows, query_index: _Index, passage_index: _Index):
    for query, passages in zip(rows.queries, rows.passages, strict=True):
        query_index(query)
        for passage in passages:
            passage_index(passage)
    return query_index.keys, passage_index.keys


def _candidates_of_rows(config: RerankingConfig, rows: _Rows) -> Candidates:
    """Each distinct query among the passages its rows give it: a row's positive (or a
    pair labelled at least RELEVANT) relevant (1), the others judged not (0). Its ids are
    q0, q1, ... and d0, d1, ... in the order the texts first appear (eval_run.trec's)."""
    _check_labels(config, rows)
    query_index, passage_index = _Index(), _Index()
    queries, passages = _texts_of(rows, query_index, passage_index)
    qrels: dict[str, dict[str, int]] = {}
    for i, (query, row) in enumerate(zip(rows.queries, rows.passages, strict=True)):
        relevant = (
            [rows.labels[i] >= RELEVANT] if config.pairs else [True] + [False] * (len(row) - 1)
        )
        judged = qrels.setdefault(f"q{query_index(query)}", {})
        for passage, is_relevant in zip(row, relevant, strict=True):
            key = f"d{passage_index(passage)}"
            judged[key] = max(judged.get(key, 0), int(is_relevant))
    pools = {qid: list(judged) for qid, judged in qrels.items()}
    query_ids = [f"q{i}" for i in range(len(queries))]
    passage_ids = [f"d{i}" for i in range(len(passages))]
    candidates = _candidates(
        rows.path, pools, qrels, dict(zip(query_ids, queries, strict=True)),
        dict(zip(passage_ids, passages, strict=True)),
    )  # fmt: skip
    _check_rerankable(candidates, "eval_file", rows.path, "give each query a passage that is not")
    return candidates


# ----------------------------------------------------------------------------- batches


def make_reranking_dataset(
    task: RerankingTask, tokenizer, *, split: str, **batching
) -> tuple[tf.data.Dataset, records.SplitInfo]:
    """This host's batches of `split` ('train' or 'eval'), as the module docstring says.
    `batching` is records.batch_indices' keyword arguments."""
    config = task.config
    texts = records.task_split(task, split)
    width = config.group_size
    side = _Pieces(tokenizer, texts.queries, texts.passages, config)
    rows = batching["batch_size"]
    if split == "train":
        valid = texts.candidates >= 0
        candidates = np.maximum(texts.candidates, 0)
        queries = np.broadcast_to(texts.query[:, None], candidates.shape)
        group_bucket = np.where(valid, side.bucket(queries, candidates), 0).max(axis=1)
        indices, info = batch_indices(
            len(texts), training=True, buckets=(group_bucket,), **batching
        )
        tables = {
            name: tf.constant(value)
            for name, value in (
                ("query", np.ascontiguousarray(queries)),
                ("passage", candidates),
                ("labels", texts.labels),
                ("candidate_weight", valid.astype(np.float32)),
            )
        }

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight, position, bucket):
            at = functools.partial(tf.gather, indices=index)
            batch = side.lay_out(at(tables["query"]), at(tables["passage"]), bucket)
            batch["labels"] = at(tables["labels"])
            batch["candidate_weight"] = at(tables["candidate_weight"])
            batch["example_weight"] = weight
            return records.finish_batch(batch, (position,), batch_size=rows, rows=rows)

    else:
        count = len(texts.pairs)
        slots = np.minimum(np.arange(-(-count // width) * width), count - 1).reshape(-1, width)
        pair_bucket = side.bucket(texts.pairs[:, 0], texts.pairs[:, 1])
        indices, info = batch_indices(
            len(slots), training=False, buckets=(pair_bucket[slots].max(axis=1),), **batching
        )
        query_table, passage_table = tf.constant(texts.pairs[:, 0]), tf.constant(texts.pairs[:, 1])

        @tf.autograph.experimental.do_not_convert
        def encode(index, weight, bucket):
            slot = index[:, None] * width + tf.range(width)[None, :]
            real = (weight[:, None] > 0) & (slot < count)
            pair = tf.minimum(slot, count - 1)
            query, passage = tf.gather(query_table, pair), tf.gather(passage_table, pair)
            batch = side.lay_out(query, passage, bucket)
            batch["query_index"] = tf.where(real, query, -1)
            batch["passage_index"] = tf.where(real, passage, -1)
            batch["candidate_weight"] = tf.cast(real, tf.float32)
            batch["example_weight"] = weight
            return records.finish_batch(batch, (), batch_size=rows, rows=rows)

    return indices.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2), info


class _Pieces:
    """The queries' and passages' word pieces (tokenized once here; the batches only
    gather), the bucket lengths, and a pair's bucket."""

    def __init__(self, tokenizer, queries: list[str], passages: list[str], config):
        self.config, self.vocab = config, tokenizer.vocab
        self.lengths = bucket_lengths(config.max_seq_length, config.length_buckets)
        (query_flat, query_splits), (passage_flat, passage_splits) = (
            tokenize_texts(tokenizer, texts) for texts in (queries, passages)
        )
        self.queries = tf.RaggedTensor.from_row_splits(query_flat, query_splits)
        self.passages = tf.RaggedTensor.from_row_splits(passage_flat, passage_splits)
        self.query_tokens = np.minimum(np.diff(query_splits), config.max_query_length)
        self.passage_tokens = np.diff(passage_splits)

    def bucket(self, query: np.ndarray, passage: np.ndarray) -> np.ndarray:
        """int32, each pair's bucket (query and passage indices, any shape alike)."""
        tokens = 3 + self.query_tokens[query] + self.passage_tokens[passage]
        tokens = np.minimum(tokens, self.config.max_seq_length)
        return np.searchsorted(self.lengths, tokens).astype(np.int32)

    def lay_out(self, query: tf.Tensor, passage: tf.Tensor, bucket: tf.Tensor) -> dict:
        """The pairs of query and passage indices [B, G], each row's G pairs side by side
        at the bucket's length: MODEL_INPUTS, int32 [B, G * length]."""
        laid = pair_layout(
            tf.gather(self.queries, tf.reshape(query, [-1])),
            tf.gather(self.passages, tf.reshape(passage, [-1])),
            max_query_length=self.config.max_query_length,
            max_seq_length=self.config.max_seq_length,
            vocab=self.vocab,
        )
        length = tf.gather(self.lengths, bucket)
        return {
            name: tf.reshape(laid[name][:, :length], [tf.shape(query)[0], -1])
            for name in MODEL_INPUTS
        }


def encode_pairs(
    tokenizer,
    queries: tf.Tensor,
    passages: tf.Tensor,
    *,
    max_query_length: int,
    max_seq_length: int,
) -> dict[str, tf.Tensor]:
    """tf.string [N] queries and passages -> MODEL_INPUTS int32 [N, max_seq_length], laid
    out as the task trains (`pair_layout`): for reranking new pairs, and in a SavedModel."""
    count = tf.shape(queries)[0]
    pieces = tokenizer.tokenize(tf.concat([queries, passages], 0))  # one call for both
    return pair_layout(
        pieces[:count], pieces[count:], max_query_length=max_query_length,
        max_seq_length=max_seq_length, vocab=tokenizer.vocab,
    )  # fmt: skip


def pair_layout(
    queries: tf.RaggedTensor, passages: tf.RaggedTensor, *, max_query_length: int,
    max_seq_length: int, vocab,
) -> dict[str, tf.Tensor]:  # fmt: skip
    """Word pieces [N, (pieces)] of queries and passages -> `[CLS] query [SEP] passage
    [SEP]` rows, MODEL_INPUTS int32 [N, max_seq_length]: the query cut to
    max_query_length pieces, then the pair by lay_out's rule."""
    return lay_out(
        queries[:, :max_query_length], passages, tf.ones([queries.nrows()], tf.bool),
        max_seq_length=max_seq_length, cls_id=vocab.cls_id, sep_id=vocab.sep_id,
        pad_id=vocab.pad_id,
    )  # fmt: skip
