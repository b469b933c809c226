"""SQuAD 1.1 and 2.0: questions in, fixed-shape windows out.

    read_squad_json / read_squad_tfds -> SquadData (questions, checked)
      -> make_features (one tokenizer call per batch of words, not per word)
      -> make_dataset (tf.data batches of the schema below)
      ... the model gives start and end logits per row; bertjax/tasks/squad.py turns
      them back into answers (predict_answers, write_predictions) ...

`load_squad_task` and `make_task_dataset` do the same from `config.data`
(`SquadConfig`): official JSON files (source='files') or the TFDS datasets
squad/v1.1 and squad/v2.0 (source='tfds'), both splits read, checked and
windowed before training.

Features follow the original run_squad.py. The context is split into words at
whitespace (space, tab, CR, LF, U+202F), each word is tokenized on its own, and
an answer's character offsets pick its first and last word, then the tightest
run of word pieces that tokenizes like the answer text. The query keeps its
first `max_query_length` pieces; the document is cut into windows of
`max_seq_length - len(query) - 3` pieces, each starting `doc_stride` after the
one before, and a row reads `[CLS] query [SEP] window [SEP]`, padded. A piece
seen by several windows has its "maximum context" in the one with the highest
score min(pieces to its left, pieces to its right) + 0.01 * window length, as
the original's `_check_is_max_context` (the first window on a tie); only there
may a predicted answer start. A row whose window does not hold the whole answer,
or whose question has none, points both positions at [CLS] (0).

Every batch is a dict with a leading batch axis B (this host's share):

| feature          | dtype   | shape  | meaning                                               |
|------------------|---------|--------|-------------------------------------------------------|
| input_ids        | int32   | [B, L] | `[CLS] query [SEP] window [SEP]`, padded with [PAD]    |
| input_mask       | int32   | [B, L] | 1 on real tokens, 0 on padding                         |
| segment_ids      | int32   | [B, L] | 0 for `[CLS] query [SEP]`, 1 for `window [SEP]`        |
| start_positions  | int32   | [B]    | answer start in the row, 0 ([CLS]) when not in it      |
| end_positions    | int32   | [B]    | answer end (inclusive), 0 when not in it               |
| example_weight   | float32 | [B]    | 1.0, or 0.0 for the rows padding the last eval batch   |
| feature_index    | int32   | [B]    | the row of `SquadFeatures` it came from; -1 on padding |
| stream_position  | int64   | [B, 1] | training only: global batches consumed after it        |

L = max_seq_length. Rows are features, drawn by records.batch_indices:
training batches are shuffled anew each epoch and full; evaluation yields every
feature once over all processes, in order.

With `pack_examples` (off by default) a run packs each batch's windows into fewer
rows (data_pipeline/packing.py): input_mask then numbers the windows of a row,
`cls_positions` [R, K] says where each starts and `example_slot` [B] where each
went; start_positions, end_positions, example_weight and feature_index are
[R, K], the positions counted from the start of the row (the window's [CLS]
plus its own position). The eval padding windows are then copies of feature 0
(weight 0, feature_index -1), as planned by `packed_shape`. The span loss is a
softmax over each window's own tokens (bertjax/losses.py), packed or not.

Every problem in the data is a `SquadError` (a TaskDataError) naming the file
(or TFDS dataset and split) and the question, raised while reading, before any
training; a bad option is a ConfigError naming `config.data.<option>`.
"""

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline import files, packing
from data_pipeline.finetune import records
from data_pipeline.finetune.records import (
    SPLITS,
    SplitInfo,
    TaskDataError,
    batch_indices,
    fail,
    task_split,
    tfds_builder,
    tfds_dataset,
    tokenize_texts,
)
from data_pipeline.finetune.squad_config import SquadConfig, from_config

# run_squad.py's word separators: Python's str.split() would also split at
# U+00A0 and friends, which the original keeps inside a word.
_WORD = re.compile("[^ \t\r\n\u202f]+")


class SquadError(TaskDataError):
    """SQuAD data that cannot be used; the message names the file and, if any, the question."""


# ----------------------------------------------------------------------------- questions


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context


@dataclasses.dataclass(frozen=True)
class SquadExample:
    qid: str
    question: str
    context: str
    answers: tuple[Answer, ...]  # empty when is_impossible
    is_impossible: bool = False
    plausible_answers: tuple[Answer, ...] = ()  # SQuAD 2.0, unanswerable questions only
    title: str = ""


@dataclasses.dataclass(frozen=True)
class SquadData:
    source: str  # the file, or the TFDS dataset and split, for messages
    examples: tuple[SquadExample, ...]

    def gold_answers(self) -> dict[str, list[str]]:
        """question id -> answer texts ([] when unanswerable), for bertjax.tasks.scores.squad_scores."""
        return {e.qid: [a.text for a in e.answers] for e in self.examples}


def read_squad_json(path: str, *, labelled: bool = True) -> SquadData:
    """An official SQuAD file: data -> paragraphs -> context, qas -> id, question, answers.

    `labelled=False` reads questions to predict: their answers may be absent.
    """
    path = os.fspath(path)
    try:
        text = files.read_bytes(path).decode("utf-8")
    except OSError as e:
        raise SquadError(f"{path}: cannot read the SQuAD file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SquadError(f"{path}: not UTF-8 text: {e}") from None
    try:
        root = json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadError(f"{path}: not valid JSON: {e}") from None
    examples = []
    for i, article in enumerate(_get(root, "data", list, path, "the file")):
        where = f"data[{i}]"
        title = _get(article, "title", str, path, where, default="")
        for j, paragraph in enumerate(_get(article, "paragraphs", list, path, where)):
            where = f"data[{i}].paragraphs[{j}]"
            context = _get(paragraph, "context", str, path, where)
            for k, qa in enumerate(_get(paragraph, "qas", list, path, where)):
                where = f"data[{i}].paragraphs[{j}].qas[{k}]"
                qid = _get(qa, "id", str, path, where)
                where = f"question {qid!r} ({where})"
                answers = _answers(qa, "answers", path, where, required=labelled)
                examples.append(
                    SquadExample(
                        qid=qid,
                        question=_get(qa, "question", str, path, where),
                        context=context,
                        answers=answers,
                        is_impossible=_get(qa, "is_impossible", bool, path, where, default=False)
                        or (not labelled and not answers),
                        plausible_answers=_answers(qa, "plausible_answers", path, where),
                        title=title,
                    )
                )
    return _checked(SquadData(path, tuple(examples)))


def read_squad_tfds(name: str, split: str, data_dir: str = "") -> SquadData:
    """A prepared TFDS SQuAD dataset ('squad/v1.1' or 'squad/v2.0'), e.g. split 'validation'."""
    source = f"tfds:{name}:{split}"
    builder = tfds_builder(name, data_dir)
    features = builder.info.features
    missing = [k for k in ("id", "question", "context", "answers") if k not in features]
    if missing:
        raise SquadError(f"{source}: not a SQuAD dataset (no feature {', '.join(missing)})")
    dataset = tfds_dataset(builder, name, split)

    def answers(record, qid, key) -> tuple[Answer, ...]:
        texts, starts = record["text"], record["answer_start"]
        if len(texts) != len(starts):
            raise SquadError(
                f"{source}: question {qid!r}: {key} has {len(texts)} texts but "
                f"{len(starts)} answer_start values"
            )
        return tuple(Answer(t.decode("utf-8"), int(s)) for t, s in zip(texts, starts, strict=True))

    examples = []
    for record in dataset.as_numpy_iterator():
        qid = record["id"].decode("utf-8")
        examples.append(
            SquadExample(
                qid=qid,
                question=record["question"].decode("utf-8"),
                context=record["context"].decode("utf-8"),
                answers=answers(record["answers"], qid, "answers"),
                is_impossible=bool(record.get("is_impossible", False)),
                plausible_answers=(
                    answers(record["plausible_answers"], qid, "plausible_answers")
                    if "plausible_answers" in record
                    else ()
                ),
                title=record["title"].decode("utf-8") if "title" in record else "",
            )
        )
    return _checked(SquadData(source, tuple(examples)))


def _get(obj, key, kind, source, where, default=None):
    if not isinstance(obj, dict):
        raise SquadError(f"{source}: {where} is {_json_type(obj)}, expected an object")
    if key not in obj:
        if default is not None:
            return default
        raise SquadError(f"{source}: {where} has no {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SquadError(
            f"{source}: {where}: {key!r} is {_json_type(value)}, expected {_json_type(kind())}"
        )
    return value


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number"}
    return "null" if value is None else names.get(type(value), f"a {type(value).__name__}")


def _answers(qa, key, source, where, *, required=False) -> tuple[Answer, ...]:
    found = []
    for n, answer in enumerate(_get(qa, key, list, source, where, None if required else [])):
        at = f"{where}, {key}[{n}]"
        text = _get(answer, "text", str, source, at)
        found.append(Answer(text, _get(answer, "answer_start", int, source, at)))
    return tuple(found)


def _checked(data: SquadData) -> SquadData:
    if not data.examples:
        raise SquadError(f"{data.source}: no questions")
    seen = set()
    for example in data.examples:
        where = f"{data.source}: question {example.qid!r}"
        if example.qid in seen:
            raise SquadError(f"{where}: the id is used twice; predictions are keyed by id")
        seen.add(example.qid)
        if example.is_impossible and example.answers:
            raise SquadError(f"{where}: is_impossible, yet it has answers")
        if not example.is_impossible and not example.answers:
            raise SquadError(f"{where}: no answers, and not marked is_impossible")
        for answer in example.answers:
            end = answer.start + len(answer.text)
            if not answer.text.strip():
                raise SquadError(f"{where}: an answer has no text (empty or blank)")
            if answer.start < 0 or end > len(example.context):
                raise SquadError(
                    f"{where}: answer {answer.text!r} at answer_start={answer.start} runs "
                    f"outside the context ({len(example.context)} characters)"
                )
            if example.context[answer.start : end] != answer.text:
                raise SquadError(
                    f"{where}: answer {answer.text!r} does not match the context at "
                    f"answer_start={answer.start}, which reads "
                    f"{example.context[answer.start : end]!r}"
                )
    return data


# ----------------------------------------------------------------------------- features


# eq=False: NumPy fields; compared and hashed by identity.
@dataclasses.dataclass(frozen=True, eq=False)
class SquadDocument:
    """One context, split and tokenized once for all of its questions."""

    words: tuple[str, ...]
    token_ids: np.ndarray  # int32 [T]: every word's pieces, in order
    token_to_word: np.ndarray  # int32 [T]
    word_to_token: np.ndarray  # int32 [W]: a word's first piece (the next word's if it has none)
    char_to_word: np.ndarray  # int32 [len(context)]: whitespace maps to the word before it


@dataclasses.dataclass(frozen=True, eq=False)
class SquadFeatures:
    """Every window of every question, row f being feature f.

    doc_start[f] is the window's first piece in its document, placed at
    position doc_offset[f] (query length + 2) of the row; doc_length[f] pieces
    follow. max_context[f, p] is True where position p is a document piece
    whose maximum context is this window.
    """

    data: SquadData
    config: SquadConfig
    documents: tuple[SquadDocument, ...]  # per example; questions on one context share it
    pad_id: int
    example_index: np.ndarray  # int32 [F], ascending
    doc_start: np.ndarray  # int32 [F]
    doc_offset: np.ndarray  # int32 [F]
    doc_length: np.ndarray  # int32 [F]
    input_ids: np.ndarray  # int32 [F, L]
    input_mask: np.ndarray  # int8 [F, L]
    segment_ids: np.ndarray  # int8 [F, L]
    start_positions: np.ndarray  # int32 [F]
    end_positions: np.ndarray  # int32 [F]
    max_context: np.ndarray  # bool [F, L]

    @property
    def num_examples(self) -> int:
        return len(self.data.examples)

    @property
    def num_features(self) -> int:
        return len(self.example_index)


def make_features(data: SquadData, tokenizer, config: SquadConfig) -> SquadFeatures:
    """Tokenizes and windows every question of `data` (see the module docstring).

    Positions come from each question's first answer, for evaluation rows too.
    """
    if not config.version_2_with_negative:
        for example in data.examples:
            if example.is_impossible:
                raise SquadError(
                    f"{data.source}: question {example.qid!r} has no answer (is_impossible), "
                    "but version_2_with_negative=False; turn it on for SQuAD 2.0 data"
                )
    vocab = tokenizer.vocab
    contexts = list(dict.fromkeys(e.context for e in data.examples))
    by_context = dict(zip(contexts, _make_documents(contexts, tokenizer), strict=True))
    for example in data.examples:
        if not by_context[example.context].token_ids.size:
            raise SquadError(f"{data.source}: question {example.qid!r}: the context has no tokens")
    questions = _tokenize_texts(tokenizer, [e.question for e in data.examples])
    answers = _tokenize_texts(
        tokenizer, [e.answers[0].text if e.answers else "" for e in data.examples]
    )

    length = config.max_seq_length
    columns = {name: [] for name in ("example_index", "doc_start", "doc_offset", "doc_length")}
    rows, positions, max_context = [], [], []
    for index, example in enumerate(data.examples):
        document = by_context[example.context]
        query = questions[index][: config.max_query_length]
        doc_offset = len(query) + 2
        windows = _windows(len(document.token_ids), length - len(query) - 3, config.doc_stride)
        best_window = _best_windows(windows, len(document.token_ids))
        answer_start, answer_end = (
            _answer_span(example, document, answers[index]) if example.answers else (-1, -1)
        )
        for w, (start, size) in enumerate(windows):
            row = np.full(length, vocab.pad_id, np.int32)
            row[0] = vocab.cls_id
            row[1 : doc_offset - 1] = query
            row[doc_offset - 1] = vocab.sep_id
            row[doc_offset : doc_offset + size] = document.token_ids[start : start + size]
            row[doc_offset + size] = vocab.sep_id
            rows.append(row)
            inside = answer_start >= start and answer_end < start + size
            positions.append(
                (answer_start - start + doc_offset, answer_end - start + doc_offset)
                if answer_start >= 0 and inside
                else (0, 0)
            )
            mask = np.zeros(length, bool)
            mask[doc_offset : doc_offset + size] = best_window[start : start + size] == w
            max_context.append(mask)
            for name, value in zip(columns, (index, start, doc_offset, size), strict=True):
                columns[name].append(value)

    columns = {name: np.array(values, np.int32) for name, values in columns.items()}
    position = np.arange(length)
    used = columns["doc_offset"] + columns["doc_length"] + 1  # through the last [SEP]
    is_document = (position >= columns["doc_offset"][:, None]) & (position < used[:, None])
    positions = np.array(positions, np.int32).reshape(-1, 2)
    return SquadFeatures(
        data=data,
        config=config,
        documents=tuple(by_context[e.context] for e in data.examples),
        pad_id=vocab.pad_id,
        input_ids=np.stack(rows),
        input_mask=(position < used[:, None]).astype(np.int8),
        segment_ids=is_document.astype(np.int8),
        start_positions=positions[:, 0].copy(),
        end_positions=positions[:, 1].copy(),
        max_context=np.stack(max_context),
        **columns,
    )


def _tokenize_texts(tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
    flat, splits = tokenize_texts(tokenizer, texts)
    return [flat[a:b] for a, b in zip(splits[:-1], splits[1:], strict=True)]


def _make_documents(contexts: Sequence[str], tokenizer) -> list[SquadDocument]:
    words = [tuple(_WORD.findall(context)) for context in contexts]
    flat, splits = tokenize_texts(tokenizer, [w for ws in words for w in ws])
    documents = []
    first_word = 0
    for context, doc_words in zip(contexts, words, strict=True):
        word_splits = splits[first_word : first_word + len(doc_words) + 1]
        first_word += len(doc_words)
        token_ids = flat[word_splits[0] : word_splits[-1]]
        pieces_per_word = np.diff(word_splits)
        # Code points; U+202F and the ASCII separators are all below 2**32.
        chars = np.frombuffer(context.encode("utf-32-le", "surrogatepass"), np.uint32)
        is_space = np.isin(chars, [0x20, 0x09, 0x0D, 0x0A, 0x202F])
        starts_word = ~is_space & np.r_[True, is_space[:-1]]
        documents.append(
            SquadDocument(
                words=doc_words,
                token_ids=token_ids,
                token_to_word=np.repeat(np.arange(len(doc_words), dtype=np.int32), pieces_per_word),
                word_to_token=(word_splits[:-1] - word_splits[0]).astype(np.int32),
                char_to_word=(np.cumsum(starts_word) - 1).astype(np.int32),
            )
        )
    return documents


def _answer_span(example: SquadExample, document: SquadDocument, answer_ids) -> tuple[int, int]:
    """The first answer's first and last piece in the document (inclusive)."""
    answer = example.answers[0]
    # An answer starting on whitespace before the first word belongs to the first word.
    first_word = max(int(document.char_to_word[answer.start]), 0)
    last_word = int(document.char_to_word[answer.start + len(answer.text) - 1])
    start = int(document.word_to_token[first_word])
    if last_word + 1 < len(document.words):
        end = int(document.word_to_token[last_word + 1]) - 1
    else:
        end = len(document.token_ids) - 1
    # The words may hold more than the answer ("1889" in "(1889)."): keep the
    # first run of pieces that tokenizes exactly as the answer text does.
    n = len(answer_ids)
    if n:
        for first in range(start, end - n + 2):
            if np.array_equal(document.token_ids[first : first + n], answer_ids):
                return first, first + n - 1
    return start, end


def _windows(num_tokens: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(first piece, length) of each window over the document."""
    windows = []
    start = 0
    while True:
        size = min(num_tokens - start, room)
        windows.append((start, size))
        if start + size >= num_tokens:
            return windows
        start += min(size, stride)


def _best_windows(windows: list[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """int [T]: for each piece, the window giving it the most context on its shorter side.

    A window's score for a piece is min(pieces to its left, pieces to its right)
    + 0.01 * window length; the first window wins a tie.
    """
    starts = np.array([s for s, _ in windows])[:, None]
    sizes = np.array([n for _, n in windows])[:, None]
    piece = np.arange(num_tokens)[None, :]
    score = np.minimum(piece - starts, starts + sizes - 1 - piece) + 0.01 * sizes
    score = np.where((piece >= starts) & (piece < starts + sizes), score, -np.inf)
    return np.argmax(score, axis=0)


# ----------------------------------------------------------------------------- batches


@dataclasses.dataclass(frozen=True, eq=False)
class SquadTask:
    config: SquadConfig
    train: SquadFeatures | None
    eval: SquadFeatures | None


def load_squad_task(data_config: Any, tokenizer) -> SquadTask:
    """Reads, checks and windows both splits (those configured, for files)."""
    config = from_config(data_config)
    # Checked here, not in SquadConfig: make_features needs no source.
    if config.source == "files" and not config.train_file and not config.eval_file:
        fail("train_file", config.train_file, "source='files' needs train_file, eval_file or both")
    if config.source == "tfds" and not config.tfds_name:
        fail("tfds_name", config.tfds_name, "source='tfds' needs a dataset name")
    splits = {}
    for split in SPLITS:
        if config.source == "tfds":
            tfds_split = config.train_split if split == "train" else config.eval_split
            data = read_squad_tfds(config.tfds_name, tfds_split, config.tfds_data_dir)
        elif getattr(config, f"{split}_file"):
            data = read_squad_json(getattr(config, f"{split}_file"))
        else:
            continue
        splits[split] = make_features(data, tokenizer, config)
    return SquadTask(config, splits.get("train"), splits.get("eval"))


def make_task_dataset(task: SquadTask, *, split: str, **kwargs) -> tuple[tf.data.Dataset, int]:
    """make_dataset (same keywords) over `split` ('train' or 'eval'), and its number of batches."""
    dataset, info = make_dataset(task_split(task, split), training=split == "train", **kwargs)
    return dataset, info.num_batches


def packed_shape(task: SquadTask, *, split: str, **batching) -> packing.PackShape:
    """records.packed_shape for `split`'s features; `batching` is its keyword arguments."""
    features = task_split(task, split)
    lengths = features.input_mask.sum(axis=1)
    return records.packed_shape(lengths, features.config.max_seq_length, split=split, **batching)


def make_dataset(
    features: SquadFeatures,
    *,
    training: bool,
    packed: packing.PackShape | None = None,
    **batching,
) -> tuple[tf.data.Dataset, SplitInfo]:
    """This host's batches of `features`, one feature a row, in the schema above.

    Rows are drawn as records.batch_indices draws examples: `batching` is its keyword
    arguments (batch_size required); the eval padding rows have weight 0 and
    feature_index -1. `packed` (from packed_shape, with the same arguments) packs every
    batch into that shape.
    """
    batch_size = batching["batch_size"]
    indices, info = batch_indices(features.num_features, training=training, **batching)
    columns = {
        name: tf.constant(getattr(features, name))
        for name in ("input_ids", "input_mask", "segment_ids", "start_positions", "end_positions")
    }

    # Graph code only: autograph's rewrite of Python source costs seconds at every program start.
    @tf.autograph.experimental.do_not_convert
    def gather(index, weight, *position):
        real = weight > 0
        batch = {}
        for name, column in columns.items():
            values = tf.cast(tf.gather(column, index), tf.int32)
            blank = features.pad_id if name == "input_ids" else 0
            keep = tf.reshape(real, [-1] + [1] * (len(column.shape) - 1))
            # Packed, padding keeps feature 0's tokens: packed_shape planned room for them.
            batch[name] = values if packed else tf.where(keep, values, blank)
        batch["example_weight"] = weight
        batch["feature_index"] = tf.where(real, index, -1)
        rows = batch_size
        if packed:
            tokens = {k: batch.pop(k) for k in ("input_ids", "input_mask", "segment_ids")}
            batch = packing.pack(
                tokens,
                batch,
                packed,
                pad_id=features.pad_id,
                first_row=batching.get("process_index", 0) * packed.rows,
            )
            # Positions in the row: each window's tokens start at its [CLS].
            for name in ("start_positions", "end_positions"):
                batch[name] += batch["cls_positions"]
            rows = packed.rows
        return records.finish_batch(batch, position, batch_size=batch_size, rows=rows)

    dataset = indices.map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE), info
