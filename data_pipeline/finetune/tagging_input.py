"""Token tagging (NER) from CoNLL files or TFDS, labelled on the first word piece of each word.

Sources, by `config.source`:
  'files'  CoNLL format: one word per line in whitespace-separated columns, the
           word first and its tag in column `tag_column` (default the last); a
           blank line ends a sentence; `-DOCSTART-` lines are skipped. All lines
           of a file have the same number of columns.
  'tfds'   a TFDS dataset with a Sequence(Text) of words and a Sequence(ClassLabel)
           of tags: by default `conll2003` ('tokens' and 'ner'; splits train, dev, test).

The label set is the training file's tags, sorted, unless `label_names` fixes
it; for TFDS it is the ClassLabel's names. `load_tagging_task` reads and checks
both splits before any training, as classification.py does.

Each word is tokenized on its own (the words of many sentences go through the
in-graph tokenizer in one call). Its tag goes on its first piece; the other
pieces get weight 0. A word that tokenizes to nothing (only control characters,
say) becomes [UNK], so that every word has a first piece.

A sentence with more than max_seq_length - 2 pieces is split at word boundaries
into consecutive windows, each `[CLS] words [SEP]`, so every word is predicted
exactly once, in one window; `tags_from_predictions` puts the windows' per-piece
predictions back together into one tag per word. A single word with more pieces
than a window holds keeps its first max_seq_length - 2 (counted in WindowStats,
and logged).

Every batch is a dict with a leading axis B, this host's `batch_size`, and
L = `max_seq_length`; one example is one window:

| feature         | dtype   | shape  | meaning                                                |
|-----------------|---------|--------|--------------------------------------------------------|
| input_ids       | int32   | [B, L] | `[CLS] pieces [SEP]`, padded with [PAD]                 |
| input_mask      | int32   | [B, L] | 1 on tokens, 0 on padding                               |
| segment_ids     | int32   | [B, L] | all 0                                                   |
| label_ids       | int32   | [B, L] | the word's tag (index into label_names) on its first piece, else 0 |
| label_weights   | float32 | [B, L] | 1.0 on the first piece of each word, else 0.0           |
| word_index      | int32   | [B, L] | the word's position in its sentence on first pieces, else -1 |
| sentence_id     | int32   | [B]    | the sentence's position in the split                    |
| example_weight  | float32 | [B]    | 1.0; 0.0 on the padding of the last eval batches        |
| stream_position | int64   | [B, 1] | training only: global batches consumed after it         |

Batches are drawn by records.batch_indices, one window being one
example. The eval padding rows have label_weights 0, word_index -1 and
sentence_id -1, so they count nowhere even when example_weight is ignored.

With `pack_examples` (the default) a run packs each batch's windows into fewer
rows (data_pipeline/packing.py): input_mask then numbers the windows of a row,
label_ids, label_weights and word_index move with their tokens (word_index -1
on padding: TOKEN_PADDING), sentence_id and example_weight are [R, K],
`cls_positions` [R, K] says where each window starts and `example_slot` [B]
where each window went. `packed_shape` plans R and K.
"""

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from data_pipeline import packing
from data_pipeline.finetune import records
from data_pipeline.finetune.records import (
    OPTION_PREFIX,
    SplitInfo,
    TaskDataError,
    batch_indices,
    label_ids,
    read_text_file,
    sorted_labels,
    task_split,
    tfds_builder,
    tfds_dataset,
    tokenize_texts,
)
from data_pipeline.finetune.tagging_config import TaggingConfig, from_config

DOCSTART = "-DOCSTART-"
# The per-token columns, moved with their tokens when windows are packed, and their
# value on padding where it is not 0.
TOKEN_COLUMNS = ("label_ids", "label_weights", "word_index")
TOKEN_PADDING = {"word_index": -1}


@dataclasses.dataclass(frozen=True, eq=False)
class Sentences:
    """One split in memory. `source` names it in messages (a path, or tfds:conll2003:dev)."""

    source: str
    words: tuple[tuple[str, ...], ...]
    tags: tuple[np.ndarray, ...]  # int32 [words] per sentence, indices into label_names

    def __len__(self) -> int:
        return len(self.words)


@dataclasses.dataclass(frozen=True, eq=False)
class TaggingTask:
    config: TaggingConfig
    name: str  # the TFDS dataset, or the training (else eval) file's base name
    label_names: tuple[str, ...]
    train: Sentences | None
    eval: Sentences | None


def load_tagging_task(data_config: Any) -> TaggingTask:
    """Reads and checks both splits (those configured, for files)."""
    config = from_config(data_config)
    if config.source == "tfds":
        return _load_tfds(config)
    conll = {
        split: _read_conll(path, config.tag_column, f"{split}_file")
        for split, path in (("train", config.train_file), ("eval", config.eval_file))
        if path
    }
    if config.label_names:
        label_names, label_source = config.label_names, f"{OPTION_PREFIX}label_names"
    else:
        _, train_sentences = conll["train"]
        label_names = sorted_labels([tag for _, tags, _ in train_sentences for tag in tags])
        label_source = config.train_file
    sentences = {
        split: _sentences(read, label_names, label_source) for split, read in conll.items()
    }
    return TaggingTask(
        config=config,
        name=os.path.splitext(os.path.basename(config.train_file or config.eval_file))[0],
        label_names=label_names,
        train=sentences.get("train"),
        eval=sentences.get("eval"),
    )


# (path, [(words, tags, line of each word)]) as read from a CoNLL file.
_Conll = tuple[str, list[tuple[list[str], list[str], list[int]]]]


def _read_conll(path: str, tag_column: int, option: str) -> _Conll:
    text = read_text_file(path, option)
    sentences = []
    words, tags, lines = [], [], []
    columns = first_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0] == DOCSTART:
            if words:
                sentences.append((words, tags, lines))
                words, tags, lines = [], [], []
            continue
        if columns is None:
            columns, first_line = len(parts), number
            if not -columns <= tag_column < columns or tag_column % columns == 0:
                raise TaskDataError(
                    f"{path}: line {number} has {columns} columns; "
                    f"{OPTION_PREFIX}tag_column={tag_column} needs a column after the word"
                )
        elif len(parts) != columns:
            raise TaskDataError(
                f"{path}: line {number} has {len(parts)} columns; line {first_line} has {columns}"
            )
        words.append(parts[0])
        tags.append(parts[tag_column])
        lines.append(number)
    if words:
        sentences.append((words, tags, lines))
    if not sentences:
        raise TaskDataError(f"{path} ({OPTION_PREFIX}{option}): no sentences")
    return path, sentences


def _sentences(conll: _Conll, label_names, label_source) -> Sentences:
    path, sentences = conll
    tags = tuple(
        label_ids(path, lines, sentence_tags, label_names, label_source, "tag")
        for _, sentence_tags, lines in sentences
    )
    return Sentences(path, tuple(tuple(words) for words, _, _ in sentences), tags)


def _load_tfds(config: TaggingConfig) -> TaggingTask:
    name = config.tfds_name
    builder = tfds_builder(name, config.tfds_data_dir)
    features = builder.info.features
    for option in ("tfds_words_feature", "tfds_tags_feature"):
        if getattr(config, option) not in features:
            raise TaskDataError(
                f"TFDS dataset {name!r} has no feature {OPTION_PREFIX}{option}="
                f"{getattr(config, option)!r}; it has {sorted(features)}"
            )
    label_names = tuple(getattr(features[config.tfds_tags_feature].feature, "names", ()))
    if not label_names:
        raise TaskDataError(
            f"TFDS dataset {name!r}: {config.tfds_tags_feature!r} is not a sequence of ClassLabel"
        )
    splits = {}
    for split, tfds_split in (("train", config.train_split), ("eval", config.eval_split)):
        source = f"tfds:{name}:{tfds_split}"
        all_words, all_tags = [], []
        dataset = tfds_dataset(builder, name, tfds_split)
        for index, example in enumerate(dataset.as_numpy_iterator()):
            words = example[config.tfds_words_feature]
            tags = example[config.tfds_tags_feature]
            if len(words) != len(tags):
                raise TaskDataError(
                    f"{source}: example {index} has {len(words)} words and {len(tags)} tags"
                )
            if len(words):  # the conll builders yield an empty example at the end of a file
                all_words.append(tuple(w.decode("utf-8") for w in words))
                all_tags.append(tags.astype(np.int32))
        if not all_words:
            raise TaskDataError(f"{source}: no sentences")
        splits[split] = Sentences(source, tuple(all_words), tuple(all_tags))
    return TaggingTask(config, name, label_names, splits["train"], splits["eval"])


# ----------------------------------------------------------------------------- encoding


@dataclasses.dataclass(frozen=True)
class WindowStats:
    sentences: int
    windows: int
    split_sentences: int  # sentences cut into more than one window
    truncated_words: int  # words with more pieces than a window, cut to max_seq_length - 2


def encode_sentences(
    sentences: Sentences, tokenizer, *, max_seq_length: int
) -> tuple[dict[str, np.ndarray], WindowStats]:
    """One row per window: every batch feature of the module docstring but example_weight."""
    vocab = tokenizer.vocab
    limit = max_seq_length - 2
    pieces, splits = tokenize_texts(tokenizer, [w for words in sentences.words for w in words])
    counts = np.diff(splits)
    truncated_words = int(np.sum(counts > limit))
    # Python lists: the loops below index them one word at a time.
    pieces, starts, counts = pieces.tolist(), splits[:-1].tolist(), counts.tolist()

    windows = []  # (sentence, first word, end word, first flat word)
    flat = 0
    for sentence, words in enumerate(sentences.words):
        start = used = 0
        for j in range(len(words)):
            count = max(1, min(counts[flat + j], limit))
            if used + count > limit:
                windows.append((sentence, start, j, flat))
                start, used = j, 0
            used += count
        windows.append((sentence, start, len(words), flat))
        flat += len(words)

    shape = (len(windows), max_seq_length)
    features = {
        "input_ids": np.full(shape, vocab.pad_id, np.int32),
        "input_mask": np.zeros(shape, np.int32),
        "segment_ids": np.zeros(shape, np.int32),
        "label_ids": np.zeros(shape, np.int32),
        "label_weights": np.zeros(shape, np.float32),
        "word_index": np.full(shape, -1, np.int32),
        "sentence_id": np.zeros(len(windows), np.int32),
    }
    for row, (sentence, start, end, flat) in enumerate(windows):
        tags = sentences.tags[sentence].tolist()
        ids = [vocab.cls_id]
        for j in range(start, end):
            position = len(ids)
            word = flat + j
            count = min(counts[word], limit)
            ids.extend(pieces[starts[word] : starts[word] + count] if count else [vocab.unk_id])
            features["label_ids"][row, position] = tags[j]
            features["label_weights"][row, position] = 1.0
            features["word_index"][row, position] = j
        ids.append(vocab.sep_id)
        features["input_ids"][row, : len(ids)] = ids
        features["input_mask"][row, : len(ids)] = 1
        features["sentence_id"][row] = sentence
    split_sentences = len(windows) - len(sentences)
    if split_sentences:
        split_sentences = int(np.sum(np.bincount(features["sentence_id"]) > 1))
    stats = WindowStats(len(sentences), len(windows), split_sentences, truncated_words)
    return features, stats


# What Python's str.split() splits words at (bertjax.tag splits a text with it).
SPLIT_WHITESPACE = (
    r"[\t\n\x0B\x0C\r\x1C-\x1F \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}"
    r"\x{202F}\x{205F}\x{3000}]+"
)


def encode_texts(tokenizer, texts: tf.Tensor, *, max_seq_length: int) -> dict[str, tf.Tensor]:
    """encode_sentences in the graph, for texts to tag (a SavedModel's): tf.string [B]
    texts, split into words at whitespace as str.split() splits them, -> the windows'
    input_ids, input_mask, segment_ids int32 [R, max_seq_length], and where each word's
    first piece went: word_row and word_position int32 [N] (the N words of all texts in
    order) and word_splits int32 [B + 1] (text i's words are N[splits[i]:splits[i + 1]])."""
    vocab = tokenizer.vocab
    limit = max_seq_length - 2
    # regex_split stops reading at a NUL; U+0001, which the tokenizer drops as it drops
    # NUL, keeps the words after it and a word of NULs alone ([UNK], as on the host).
    words = tf_text.regex_split(tf.strings.regex_replace(texts, r"\x00", "\x01"), SPLIT_WHITESPACE)
    pieces = tokenizer.tokenize(words.flat_values)[:, :limit]
    empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
    unknown = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(empty)], vocab.unk_id), empty)
    pieces = tf.concat([pieces, tf.cast(unknown, pieces.dtype)], axis=1)
    counts = tf.cast(pieces.row_lengths(), tf.int32)
    first = tf.range(tf.size(counts)) == tf.gather(
        tf.cast(words.row_starts(), tf.int32), tf.cast(words.value_rowids(), tf.int32)
    )

    def window(state, word):  # the greedy split of encode_sentences, word by word
        used, row = state
        count, starts_text = word
        new = starts_text | (used + count > limit)
        return tf.where(new, count, used + count), row + tf.cast(new, tf.int32)

    used, rows = tf.scan(window, (counts, first), initializer=(tf.constant(0), tf.constant(-1)))
    num_rows = tf.reduce_max(tf.concat([rows, [-1]], 0)) + 1
    tokens = tf.RaggedTensor.from_value_rowids(
        pieces.flat_values, tf.repeat(rows, counts), nrows=num_rows
    )
    ends = tf.ones([num_rows, 1], pieces.dtype)
    tokens = tf.concat([ends * vocab.cls_id, tokens, ends * vocab.sep_id], axis=1)
    shape = [None, max_seq_length]
    input_ids = tokens.to_tensor(vocab.pad_id, shape=shape)
    input_mask = tf.ones_like(tokens).to_tensor(0, shape=shape)
    return {
        "input_ids": tf.cast(input_ids, tf.int32),
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": tf.zeros_like(input_ids, tf.int32),
        "word_row": rows,
        "word_position": 1 + used - counts,
        "word_splits": tf.cast(words.row_splits, tf.int32),
    }


def make_tagging_dataset(
    task: TaggingTask, tokenizer, *, split: str, packed: packing.PackShape | None = None, **batching
) -> tuple[tf.data.Dataset, SplitInfo]:
    """This host's batches of `split` ('train' or 'eval'); see the module docstring.

    SplitInfo counts windows, not sentences. `batching` is records.batch_indices' keyword
    arguments (batch_size required; seed, num_epochs and position apply to training only).
    `packed` (from packed_shape, with the same arguments) packs every batch into that shape.
    """
    batch_size = batching["batch_size"]
    sentences = task_split(task, split)
    features, stats = encode_sentences(
        sentences, tokenizer, max_seq_length=task.config.max_seq_length
    )
    if stats.truncated_words:
        logging.warning(
            "%s: %d words have more than max_seq_length - 2 = %d word pieces and lose the rest",
            sentences.source,
            stats.truncated_words,
            task.config.max_seq_length - 2,
        )
    indices, info = batch_indices(
        stats.windows,
        training=split == "train",
        **batching,
    )
    constants = {name: tf.constant(value) for name, value in features.items()}
    pad_id = tokenizer.vocab.pad_id

    # Graph code only: autograph's rewrite of Python source costs seconds at every program start.
    @tf.autograph.experimental.do_not_convert
    def gather(index, weight, *position):
        batch = {name: tf.gather(value, index) for name, value in constants.items()}
        real = weight > 0
        batch["label_weights"] *= weight[:, None]
        batch["word_index"] = tf.where(real[:, None], batch["word_index"], -1)
        batch["sentence_id"] = tf.where(real, batch["sentence_id"], -1)
        batch["example_weight"] = weight
        rows = batch_size
        if packed:
            tokens = {k: batch.pop(k) for k in ("input_ids", "input_mask", "segment_ids")}
            per_token = {k: batch.pop(k) for k in TOKEN_COLUMNS}
            batch = packing.pack(
                tokens,
                batch,
                packed,
                pad_id=pad_id,
                first_row=batching.get("process_index", 0) * packed.rows,
                per_token=per_token,
                token_padding=TOKEN_PADDING,
            )
            rows = packed.rows
        return records.finish_batch(batch, position, batch_size=batch_size, rows=rows)

    dataset = indices.map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE), info


def packed_shape(task: TaggingTask, tokenizer, *, split: str, **batching) -> packing.PackShape:
    """records.packed_shape for `split`'s windows; `batching` is its keyword arguments."""
    length = task.config.max_seq_length
    features, _ = encode_sentences(task_split(task, split), tokenizer, max_seq_length=length)
    return records.packed_shape(features["input_mask"].sum(axis=1), length, split=split, **batching)


def tags_from_predictions(
    predictions, word_index, sentence_id, sentences: Sentences, label_names: Sequence[str]
) -> list[list[str]]:
    """Per-piece predicted tag ids -> one tag name per word of each sentence.

    `predictions` and `word_index` are [..., L] and `sentence_id` [...], over all
    eval batches of all processes in any order; rows with sentence_id -1 (padding)
    are ignored. Every word must be predicted exactly once.
    """
    word_index = np.asarray(word_index)
    length = word_index.shape[-1]
    word_index = word_index.reshape(-1, length)
    predictions = np.asarray(predictions).reshape(-1, length)
    sentence_id = np.broadcast_to(np.asarray(sentence_id).reshape(-1, 1), word_index.shape)
    found = (word_index >= 0) & (sentence_id >= 0)
    tags: list[list[str | None]] = [[None] * len(words) for words in sentences.words]
    for s, j, p in zip(
        sentence_id[found].tolist(),
        word_index[found].tolist(),
        predictions[found].tolist(),
        strict=True,
    ):
        if tags[s][j] is not None:
            raise ValueError(f"{sentences.source}: sentence {s}, word {j} is predicted twice")
        tags[s][j] = label_names[p]
    for s, sentence_tags in enumerate(tags):
        if None in sentence_tags:
            raise ValueError(
                f"{sentences.source}: sentence {s}, word {sentence_tags.index(None)} has no prediction"
            )
    return tags
