"""Sentence and sentence-pair classification (GLUE or local files) as fixed-shape batches.

Sources, by `config.source`:
  'files'  local files chosen by extension, with a header naming the columns
           `text_a`, `label` and, for sentence pairs, `text_b`:
             .tsv          tab-separated, no quoting, as GLUE ships its files;
             .csv          comma-separated with RFC 4180 quoting;
             .jsonl/.json  JSON lines: one object per line, the columns as keys.
  'glue'   the TFDS dataset `glue/<glue_task>`, for the nine tasks of GLUE_TASKS.

`load_classification_task` reads and checks both splits before training. The
label set is the training file's labels, sorted (numerically when all are
integers), unless `label_names` fixes it; for GLUE it is the dataset's
ClassLabel names. STS-B, and files with `is_regression`, have a float label instead.

`make_classification_dataset` tokenizes a split's texts once, up front (tf-text,
thousands of texts per call), and lays each batch's examples out in graph as
`[CLS] A [SEP] B [SEP]` (segment ids 0 then 1), or `[CLS] A [SEP]` when B is
empty or absent. Too long, the longer text loses its
last token, one at a time, B on ties: the rule of the original run_classifier.py.

Every batch is a dict with a leading axis B, this host's `batch_size`, and
L = `max_seq_length`:

| feature         | dtype   | shape  | meaning                                             |
|-----------------|---------|--------|-----------------------------------------------------|
| input_ids       | int32   | [B, L] | `[CLS] A [SEP] B [SEP]`, padded with [PAD]           |
| input_mask      | int32   | [B, L] | 1 on tokens, 0 on padding                            |
| segment_ids     | int32   | [B, L] | 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`, 0 on padding |
| label           | int32   | [B]    | index into `label_names`; float32 for regression     |
| example_weight  | float32 | [B]    | 1.0; 0.0 on the padding of the last eval batches     |
| stream_position | int64   | [B, 1] | training only: global batches consumed after it      |

Batches are drawn by records.batch_indices (the eval padding repeats example 0).

With `pack_examples` (the default) a run packs each batch's examples into
fewer rows (data_pipeline/packing.py): input_mask then numbers the examples of
a row, `cls_positions` [R, K] says where each starts, label and
example_weight are [R, K], and `example_slot` [B] where each example went. The
examples and their losses are the same; the batch costs the model R rows
instead of B. `packed_shape` plans R and K.
"""

import dataclasses
import math
import os
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline import packing
from data_pipeline.finetune import glue_files, records
from data_pipeline.finetune.classification_config import (
    GLUE_TASKS,
    ClassificationConfig,
    from_config,
)
from data_pipeline.finetune.records import (
    OPTION_PREFIX,
    SplitInfo,
    TaskDataError,
    batch_indices,
    fail,
    label_ids,
    read_records,
    sorted_labels,
    task_split,
    tfds_builder,
    tfds_dataset,
    tokenize_texts,
)

# ----------------------------------------------------------------------------- examples


@dataclasses.dataclass(frozen=True, eq=False)
class Examples:
    """One split in memory. `source` names it in messages (a path, or tfds:glue/mrpc:train)."""

    source: str
    text_a: np.ndarray  # object [N] of str
    text_b: np.ndarray  # object [N] of str; "" where there is no second text
    labels: np.ndarray  # int32 [N], or float32 [N] for regression

    def __len__(self) -> int:
        return len(self.labels)


@dataclasses.dataclass(frozen=True, eq=False)
class ClassificationTask:
    config: ClassificationConfig
    name: str  # the GLUE task, or the training (else eval) file's base name
    label_names: tuple[str, ...]  # () for regression
    metrics: tuple[str, ...]
    train: Examples | None
    eval: Examples | None

    @property
    def is_regression(self) -> bool:
        return not self.label_names

    @property
    def num_labels(self) -> int:
        """The width of the output layer: 1 for regression."""
        return len(self.label_names) or 1


def metric_names(config: ClassificationConfig) -> tuple[str, ...]:
    """The metrics a task is scored by, the first ranking runs: GLUE's for its task, else
    config.metrics or the default for regression or classification."""
    if config.source == "glue":
        return GLUE_TASKS[config.glue_task].metrics
    default = ("pearson", "spearman") if config.is_regression else ("accuracy",)
    return config.metrics or default


def load_classification_task(data_config: Any) -> ClassificationTask:
    """Reads and checks both splits (those configured, for files)."""
    config = from_config(data_config)
    if config.source == "glue":
        return _load_glue(config)
    rows = {
        split: _read_rows(config, path, f"{split}_file")
        for split, path in (("train", config.train_file), ("eval", config.eval_file))
        if path
    }
    metrics = metric_names(config)
    if config.is_regression:
        label_names = ()
    else:
        label_names = config.label_names or _label_set(rows["train"])
        if "f1" in metrics and len(label_names) != 2:
            fail("metrics", metrics, f"f1 needs two labels; there are {len(label_names)}")
    label_source = config.train_file if not config.label_names else f"{OPTION_PREFIX}label_names"
    examples = {
        split: _examples(config, split_rows, label_names, label_source)
        for split, split_rows in rows.items()
    }
    return ClassificationTask(
        config=config,
        name=os.path.splitext(os.path.basename(config.train_file or config.eval_file))[0],
        label_names=label_names,
        metrics=metrics,
        train=examples.get("train"),
        eval=examples.get("eval"),
    )


@dataclasses.dataclass(frozen=True)
class _Rows:
    path: str
    lines: list[int]
    text_a: list[str]
    text_b: list[str]
    labels: list  # str (classification) or float (regression)


def read_texts(task_config: Any, path: str) -> tuple[list[str], list[str]]:
    """The text columns of a file in the task's format, without labels: what to predict."""
    rows = _read_rows(from_config(task_config), path, "", labelled=False)
    return rows.text_a, rows.text_b


def _read_rows(
    config: ClassificationConfig, path: str, option: str, *, labelled: bool = True
) -> _Rows:
    columns = [("text_a", config.text_a)] + ([("label", config.label)] if labelled else [])
    if config.text_b:
        columns.insert(1, ("text_b", config.text_b))
    rows = _Rows(path, [], [], [], [])
    for line, values in read_records(path, columns, option):
        values = dict(zip((option for option, _ in columns), values, strict=True))
        rows.lines.append(line)
        rows.text_a.append(_text(path, line, config.text_a, values["text_a"]))
        rows.text_b.append(_text(path, line, config.text_b, values.get("text_b")))
        if labelled:
            rows.labels.append(_label(config, path, line, values["label"]))
    if not rows.lines:
        where = f" ({OPTION_PREFIX}{option})" if option else ""
        raise TaskDataError(f"{path}{where}: no examples")
    return rows


def _text(path, line, column, value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TaskDataError(
            f"{path}: line {line}: {column!r} is {type(value).__name__} {value!r}, not text"
        )
    return value


def _label(config, path, line, value):
    name = config.label
    if config.is_regression:
        try:  # text or a JSON number, not a JSON boolean (which float() would take)
            number = None if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = None
        if number is None or not math.isfinite(number):
            raise TaskDataError(f"{path}: line {line}: {name!r} is {value!r}, not a finite number")
        return number
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise TaskDataError(
            f"{path}: line {line}: {name!r} is {type(value).__name__} {value!r}; "
            "a class label is a string or an integer"
        )
    if not value.strip():
        raise TaskDataError(f"{path}: line {line}: empty label in column {name!r}")
    return value


def _label_set(rows: _Rows) -> tuple[str, ...]:
    names = sorted_labels(rows.labels)
    if len(names) < 2:
        raise TaskDataError(
            f"{rows.path}: every example has the label {names[0]!r}; "
            "classification needs at least two labels"
        )
    return names


def _examples(config, rows: _Rows, label_names, label_source) -> Examples:
    if config.is_regression:
        labels = np.asarray(rows.labels, np.float32)
    else:
        labels = label_ids(rows.path, rows.lines, rows.labels, label_names, label_source, "label")
    return Examples(rows.path, np.array(rows.text_a, object), np.array(rows.text_b, object), labels)


def _load_glue(config: ClassificationConfig) -> ClassificationTask:
    task = GLUE_TASKS[config.glue_task]
    # TFDS's split name, as eval_split spells it, as the download's files name it.
    eval_split = (config.eval_split or task.eval_splits[0]).replace("validation", "dev")
    name = f"glue/{config.glue_task}"
    if config.glue_dir:
        glue_files.check_data_dir(
            config.glue_dir, [config.glue_task], splits_of=lambda _: ("train", eval_split)
        )
    else:
        label_feature = tfds_builder(name, config.tfds_data_dir).info.features["label"]
        found = tuple(getattr(label_feature, "names", ()))
        if found != task.label_names:
            raise TaskDataError(
                f"TFDS dataset {name!r}: the labels are {list(found) or 'float'}, "
                f"GLUE_TASKS expects {list(task.label_names) or 'float'}"
            )
    examples = {}
    for split, split_name in (("train", "train"), ("eval", eval_split)):
        data = read_glue_split(config.glue_dir, config.tfds_data_dir, config.glue_task, split_name)
        labels, count = data.labels, len(task.label_names)
        if not config.glue_dir and count and (labels.min() < 0 or labels.max() >= count):
            raise TaskDataError(f"{data.source}: labels outside [0, {count}) (an unlabeled split?)")
        examples[split] = Examples(data.source, data.text_a, data.text_b, labels)
    return ClassificationTask(
        config=config,
        name=config.glue_task,
        label_names=task.label_names,
        metrics=task.metrics,
        train=examples["train"],
        eval=examples["eval"],
    )


def _tfds_split(builder, name: str, split: str, text_a: str, text_b: str | None, column: str):
    """(source, text_a, text_b, `column`'s values) of a TFDS GLUE split; the texts are
    object arrays, text_b "" throughout for a task of single texts."""
    texts_a, texts_b, values = [], [], []
    for batch in tfds_dataset(builder, name, split).batch(1024).as_numpy_iterator():
        texts_a.extend(t.decode("utf-8") for t in batch[text_a])
        if text_b:
            texts_b.extend(t.decode("utf-8") for t in batch[text_b])
        values.append(batch[column])
    source = f"tfds:{name}:{split}"
    if not texts_a:
        raise TaskDataError(f"{source}: no examples")
    texts_b = texts_b or [""] * len(texts_a)
    return source, np.array(texts_a, object), np.array(texts_b, object), np.concatenate(values)


def read_glue_split(
    glue_dir: str, tfds_data_dir: str, task: str, split: str
) -> glue_files.GlueSplit:
    """One split of a GLUE task (or "ax", the diagnostic set) from its download's folder
    `glue_dir`, or if that is "", from TFDS (in `tfds_data_dir`, "" for TFDS's). Splits are named as the download's
    files are (train, dev, dev_matched, test_mismatched, diagnostic, ...); test splits
    come with their index and without labels."""
    if glue_dir:
        glue_files.check_data_dir(glue_dir, [task], splits_of=lambda _: (split,))
        return glue_files.read_split(glue_dir, task, split)
    name = "glue/ax" if task == "ax" else f"glue/{task}"
    tfds_split = "test" if task == "ax" else split.replace("dev", "validation")
    test = glue_files.is_test(task, split)
    builder = tfds_builder(name, tfds_data_dir)
    text_a_name, text_b_name = (
        ("premise", "hypothesis")
        if task == "ax"
        else (GLUE_TASKS[task].text_a, GLUE_TASKS[task].text_b)
    )
    source, text_a, text_b, last = _tfds_split(
        builder, name, tfds_split, text_a_name, text_b_name, "idx" if test else "label"
    )
    index = labels = None
    if test:
        index = np.array([str(i) for i in last], object)
    else:
        labels = last.astype(np.float32 if GLUE_TASKS[task].is_regression else np.int32)
    return glue_files.GlueSplit(source, text_a, text_b, labels, index)


# ----------------------------------------------------------------------------- batches


def make_classification_dataset(
    task: ClassificationTask,
    tokenizer,
    *,
    split: str,
    packed: packing.PackShape | None = None,
    **batching,
) -> tuple[tf.data.Dataset, SplitInfo]:
    """This host's batches of `split` ('train' or 'eval'); see the module docstring.

    `tokenizer` is a data_pipeline.tokenizer tokenizer (make_tokenizer). `batching` is
    records.batch_indices' keyword arguments (batch_size required; seed, num_epochs and
    position apply to training only). `packed` (from packed_shape, with the same
    arguments) packs every batch into that shape.
    """
    batch_size = batching["batch_size"]
    examples = task_split(task, split)
    indices, info = batch_indices(
        len(examples),
        training=split == "train",
        **batching,
    )
    # Tokenized once here: the batches only gather (a tokenizer traced into the map
    # function would cost seconds per dataset, and tokenize every epoch again).
    pieces_a, pieces_b = (
        tf.RaggedTensor.from_row_splits(*tokenize_texts(tokenizer, list(texts)))
        for texts in (examples.text_a, examples.text_b)
    )
    has_b = tf.constant([bool(text) for text in examples.text_b], tf.bool)
    labels = tf.constant(examples.labels)
    vocab = tokenizer.vocab
    length = task.config.max_seq_length

    # Graph code only: autograph's rewrite of Python source costs seconds at every program start.
    @tf.autograph.experimental.do_not_convert
    def encode(index, weight, *position):
        features = lay_out(
            tf.gather(pieces_a, index),
            tf.gather(pieces_b, index),
            tf.gather(has_b, index),
            max_seq_length=length,
            cls_id=vocab.cls_id,
            sep_id=vocab.sep_id,
            pad_id=vocab.pad_id,
        )
        per_example = {"label": tf.gather(labels, index), "example_weight": weight}
        if packed:
            first_row = batching.get("process_index", 0) * packed.rows
            features = packing.pack(
                features, per_example, packed, pad_id=vocab.pad_id, first_row=first_row
            )
        else:
            features.update(per_example)
        rows = packed.rows if packed else batch_size
        return records.finish_batch(features, position, batch_size=batch_size, rows=rows)

    dataset = indices.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE), info


def packed_shape(
    task: ClassificationTask, tokenizer, *, split: str, **batching
) -> packing.PackShape:
    """records.packed_shape for `split`'s examples; `batching` is its keyword arguments."""
    length = task.config.max_seq_length
    lengths = example_lengths(task_split(task, split), tokenizer, length)
    return records.packed_shape(lengths, length, split=split, **batching)


def example_lengths(examples: Examples, tokenizer, max_seq_length: int) -> np.ndarray:
    """Each example's tokens as encode_texts lays it out (specials included, truncated)."""
    _, splits_a = tokenize_texts(tokenizer, list(examples.text_a))
    _, splits_b = tokenize_texts(tokenizer, list(examples.text_b))
    has_b = np.asarray([bool(text) for text in examples.text_b])
    keep_a, keep_b = truncated_lengths(
        tf.constant(np.diff(splits_a), tf.int32),
        tf.constant(np.diff(splits_b), tf.int32),
        tf.constant(np.where(has_b, max_seq_length - 3, max_seq_length - 2), tf.int32),
    )
    return 2 + keep_a.numpy() + np.where(has_b, keep_b.numpy() + 1, 0)


def truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, max_tokens: tf.Tensor):
    """The lengths run_classifier's `_truncate_seq_pair` leaves: it pops the last token of the
    longer side (B on ties) until len_a + len_b <= max_tokens. In closed form: the longer
    side alone shrinks to the other's length, then B and A lose a token in turn."""
    excess = tf.maximum(len_a + len_b - max_tokens, 0)
    first = tf.minimum(excess, tf.abs(len_a - len_b))
    a_longer = len_a > len_b
    rest = excess - first
    cut_a = tf.where(a_longer, first, 0) + rest // 2
    cut_b = tf.where(a_longer, 0, first) + (rest + 1) // 2
    return len_a - cut_a, len_b - cut_b


def encode_texts(
    tokenizer,
    text_a: tf.Tensor,
    text_b: tf.Tensor,
    *,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> dict[str, tf.Tensor]:
    """tf.string [N] pairs -> input_ids, input_mask, segment_ids int32 [N, max_seq_length].

    An empty `text_b` gives `[CLS] A [SEP]`, as the original treats a missing B.
    """
    count = tf.shape(text_a)[0]
    ids = tokenizer.tokenize(tf.concat([text_a, text_b], 0))  # one call for both sides
    has_b = tf.strings.length(text_b) > 0
    return lay_out(
        ids[:count],
        ids[count:],
        has_b,
        max_seq_length=max_seq_length,
        cls_id=cls_id,
        sep_id=sep_id,
        pad_id=pad_id,
    )


def lay_out(
    ids_a: tf.RaggedTensor,
    ids_b: tf.RaggedTensor,
    has_b: tf.Tensor,
    *,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> dict[str, tf.Tensor]:
    """Word-piece ids [N, (pieces)] of A and B -> the rows of encode_texts; `has_b` [N] says
    which examples have a B (a non-empty text_b)."""
    count = tf.shape(has_b)[0]
    budget = tf.where(has_b, max_seq_length - 3, max_seq_length - 2)
    keep_a, keep_b = truncated_lengths(
        tf.cast(ids_a.row_lengths(), tf.int32), tf.cast(ids_b.row_lengths(), tf.int32), budget
    )

    def column(token_id):
        return tf.RaggedTensor.from_tensor(tf.fill([count, 1], tf.constant(token_id, tf.int32)))

    first = tf.concat([column(cls_id), _prefix(ids_a, keep_a), column(sep_id)], axis=1)
    # B keeps its first keep_b tokens and its [SEP]; rows without B keep nothing.
    second = tf.concat([_prefix(ids_b, keep_b), column(sep_id)], axis=1)
    second = _prefix(second, tf.where(has_b, keep_b + 1, 0))
    tokens = tf.concat([first, second], axis=1)
    segments = tf.concat([tf.zeros_like(first), tf.ones_like(second)], axis=1)
    shape = [None, max_seq_length]
    return {
        "input_ids": tokens.to_tensor(default_value=pad_id, shape=shape),
        "input_mask": tf.ones_like(tokens).to_tensor(default_value=0, shape=shape),
        "segment_ids": segments.to_tensor(default_value=0, shape=shape),
    }


def _prefix(tokens: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """The first lengths[i] tokens of each row i."""
    starts = tokens.row_starts()
    return tf.gather(
        tokens.flat_values, tf.ragged.range(starts, starts + tf.cast(lengths, tf.int64))
    )
