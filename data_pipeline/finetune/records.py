"""What the fine-tuning inputs (classification_input.py, tagging_input.py, squad_input.py) share.

Reading: `read_text_file` (UTF-8, any BOM dropped), `read_records` (the
columns of a TSV, CSV or JSONL file, chosen by extension) and
`tfds_builder`/`tfds_dataset` (TFDS with its errors named). Every problem in
the data is a `TaskDataError` naming the file and line (or the dataset and
split); a bad option is a ConfigError naming `config.data.<option>` (`fail`).

Batching (`batch_indices`): training draws a new permutation of the whole
split each epoch from (seed, epoch), the same on every process, chains the
epochs, cuts them into global batches of batch_size * process_count and gives
process i the i-th slice of each. It yields
int(num_examples / global_batch_size * num_epochs) batches, the original's
num_train_steps, so an epoch may end inside a batch. Its batches carry
stream_position int64 [B, 1], the global batches consumed after them; given
such a `position`, the stream starts after that batch, skipping indices only
(before any feature is gathered), so resuming late costs no more than early.
Evaluation keeps the split's order and yields every example exactly once: the
global batches, each the processes' slices in process order, concatenate to
the split. The last one is filled with copies of example 0 whose
example_weight is 0, so every process yields the same number of full batches
and weighted metrics are exact.

Given `buckets` (arrays of a number per example: a length bucket), each batch also
carries, per array, the largest number among the examples of its whole global batch:
every process pads the same global batch to the same shape. `bucket_lengths` gives a
few such lengths.
"""

import csv
import dataclasses
import io
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline import files, packing
from data_pipeline.config import FILE_FORMATS, fail
from data_pipeline.errors import UserError
from data_pipeline.tfrecords import PositionError, check_position

SPLITS = ("train", "eval")
# The column of a pass over the training rows in order that gives each batch row its
# row's index (-1 on padding rows): where a teacher's outputs of it are stored.
ROW_INDEX = "row_index"
# A train row's stream_position: the global batches consumed after it.
POSITION_FIELDS = ("batches",)
# Options are named as the experiment config spells them.
OPTION_PREFIX = "config.data."
# Texts per tokenizer call: the tf-text ops pay a fixed cost per call.
TEXTS_PER_TOKENIZER_CALL = 1 << 15


class TaskDataError(UserError):
    """A fine-tuning file, row or dataset that cannot be used; the message names it."""


def task_split(task: Any, split: str) -> Any:
    """`task.train` or `task.eval`; a ConfigError when that split is not configured."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: must be one of {', '.join(SPLITS)}")
    found = task.train if split == "train" else task.eval
    if found is None:
        fail(f"{split}_file", "", f"no {split} split configured")
    return found


def sorted_labels(labels: Sequence[str]) -> tuple[str, ...]:
    """The distinct labels, in numeric order when all are integers, else in string order."""
    distinct = set(labels)
    if all(re.fullmatch(r"[+-]?\d+", label) for label in distinct):
        return tuple(sorted(distinct, key=lambda label: (int(label), label)))
    return tuple(sorted(distinct))


def label_ids(path, lines, labels, label_names, label_source: str, kind: str) -> np.ndarray:
    """int32 indices of `labels` (at `lines` of `path`) into `label_names`; one outside fails,
    naming its line, what the message calls it (`kind`) and where the set came from."""
    ids = {name: i for i, name in enumerate(label_names)}
    for line, label in zip(lines, labels, strict=True):
        if label not in ids:
            raise TaskDataError(
                f"{path}: line {line}: {kind} {label!r} is not in the label set "
                f"{list(label_names)} (from {label_source})"
            )
    return np.asarray([ids[label] for label in labels], np.int32)


def tokenize_texts(tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """int32 pieces of all texts, and row splits: text i has flat[splits[i]:splits[i + 1]]."""
    flat, lengths = [], []
    for begin in range(0, len(texts), TEXTS_PER_TOKENIZER_CALL):
        ids = tokenizer.tokenize(tf.constant(texts[begin : begin + TEXTS_PER_TOKENIZER_CALL]))
        flat.append(ids.flat_values.numpy())
        lengths.append(ids.row_lengths().numpy())
    splits = np.zeros(len(texts) + 1, np.int64)
    if texts:
        np.cumsum(np.concatenate(lengths), out=splits[1:])
    return (np.concatenate(flat) if flat else np.zeros(0, np.int32)), splits


# ----------------------------------------------------------------------------- reading


def read_text_file(path: str, option: str = "") -> str:
    """The file's text, UTF-8 with any BOM dropped. A TaskDataError names the file, the option
    that named it, and for bad UTF-8 the line."""
    what = f" ({OPTION_PREFIX}{option})" if option else ""
    try:
        data = files.read_bytes(path)
    except OSError as e:
        raise TaskDataError(f"{path}{what}: cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TaskDataError(
            f"{path}{what}: line {line} is not valid UTF-8 (byte {data[e.start]:#04x} "
            f"at offset {e.start})"
        ) from None
    return text.removeprefix("\ufeff")


def read_records(
    path: str,
    columns: Sequence[tuple[str, str]],
    option: str = "",
    *,
    names: Sequence[str] | None = None,
) -> Iterator[tuple[int, list]]:
    """(line, values of `columns`) for each record of a TSV, CSV or JSONL file, by extension.

    `columns` holds (option, column name) pairs; a missing column is named with
    its option. Delimited files need a header naming the columns, or `names` for a
    file without one; blank lines are skipped. JSONL values keep their JSON type.
    """
    file_format = FILE_FORMATS.get(os.path.splitext(path)[1].lower())
    if file_format is None:
        raise TaskDataError(f"{path}: unknown format; use one of {', '.join(FILE_FORMATS)}")
    text = read_text_file(path, option)
    if file_format == "jsonl":
        return _jsonl_records(path, text, columns)
    return _delimited_records(path, text, columns, file_format, names)


def _delimited_records(path, text, columns, file_format, names=None):
    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if file_format == "tsv" else {}
    reader = csv.reader(io.StringIO(text, newline=""), **dialect)
    header = None
    if names is not None:
        header = list(names)
        positions = [header.index(name) for _, name in columns]
    while True:
        line = reader.line_num + 1  # where the next record starts
        try:
            row = next(reader, None)
        except csv.Error as e:
            raise TaskDataError(f"{path}: line {line}: {e}") from None
        if row is None:
            break
        if not row:
            continue
        if header is None:
            header = row
            for option, name in columns:
                if name not in header:
                    raise TaskDataError(
                        f"{path}: no column {name!r} ({OPTION_PREFIX}{option}); "
                        f"the header (line {line}) has {header}"
                    )
            positions = [header.index(name) for _, name in columns]
            continue
        if len(row) != len(header):
            raise TaskDataError(
                f"{path}: line {line} has {len(row)} fields; the header has {len(header)}"
            )
        yield line, [row[i] for i in positions]
    if header is None:
        raise TaskDataError(f"{path}: empty file; expected a header naming the columns")


def _jsonl_records(path, text, columns):
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TaskDataError(
                f"{path}: line {line} is not valid JSON ({e.msg}); JSON lines hold one object a line"
            ) from None
        if not isinstance(record, dict):
            raise TaskDataError(f"{path}: line {line} is not a JSON object")
        for option, name in columns:
            if name not in record:
                raise TaskDataError(
                    f"{path}: line {line}: no key {name!r} ({OPTION_PREFIX}{option}); "
                    f"the keys are {sorted(record)}"
                )
        yield line, [record[name] for _, name in columns]


def tfds_builder(name: str, data_dir: str):
    """tfds.builder(name), with its errors as TaskDataError."""
    # Imported here: tensorflow_datasets takes seconds to import and only TFDS sources need it.
    import tensorflow_datasets as tfds

    try:
        return tfds.builder(name, data_dir=data_dir or None)
    except (ValueError, OSError) as e:  # DatasetNotFoundError is a ValueError
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TaskDataError(f"TFDS dataset {name!r}: {first_line}") from e


def tfds_dataset(builder, name: str, split: str) -> tf.data.Dataset:
    """A TFDS split in its stored order, with its errors as TaskDataError."""
    try:
        return builder.as_dataset(split=split, shuffle_files=False)
    except (AssertionError, KeyError, ValueError) as e:  # TFDS asserts that the data exists
        raise TaskDataError(
            f"TFDS dataset {name!r} (data_dir={str(builder.data_dir)!r}), split {split!r}: "
            f"{str(e).strip().splitlines()[0]} (prepare it with `tfds build {name}`)"
        ) from e


def check_tfds_split(name: str, data_dir: str, split: str) -> None:
    """Fails, saying how to prepare it, when the TFDS dataset has no `split` prepared."""
    builder = tfds_builder(name, data_dir)
    if split not in builder.info.splits:
        raise TaskDataError(
            f"TFDS dataset {name!r} (data_dir={str(builder.data_dir)!r}) has no split "
            f"{split!r}: prepare it with `tfds build {name}`"
        )


# ----------------------------------------------------------------------------- batching


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    num_examples: int  # in the split, all processes together
    global_batch_size: int  # batch_size * process_count
    num_batches: int  # what the dataset yields, the same on every process


def batch_indices(
    num_examples: int,
    *,
    training: bool,
    batch_size: int,
    process_index: int = 0,
    process_count: int = 1,
    seed: int = 0,
    num_epochs: float = 1.0,
    position: Any = None,
    buckets: Sequence[np.ndarray] = (),
) -> tuple[tf.data.Dataset, SplitInfo]:
    """(indices int32 [batch_size], example_weight float32 [batch_size]) per batch, as the
    module docstring describes; training adds stream_position int64 [batch_size, 1], then
    each of `buckets` (int [num_examples]) adds its global batch's largest, int32 []."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be at least 1")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} is not in [0, {process_count})")
    if num_examples < 1:
        raise ValueError("no examples")
    global_batch = batch_size * process_count
    start = process_index * batch_size
    if not training:
        if position is not None:
            raise PositionError(f"stream position {position}: evaluation reads from the start")
        num_batches = -(-num_examples // global_batch)
        indices = np.arange(num_batches * global_batch, dtype=np.int32)
        weights = (indices < num_examples).astype(np.float32)
        indices[num_examples:] = 0
        indices = indices.reshape(num_batches, global_batch)
        largest = [np.asarray(bucket, np.int32)[indices].max(axis=1) for bucket in buckets]
        indices = indices[:, start : start + batch_size]
        weights = weights.reshape(num_batches, global_batch)[:, start : start + batch_size]
        dataset = tf.data.Dataset.from_tensor_slices((indices, weights, *largest))
        return dataset, SplitInfo(num_examples, global_batch, num_batches)

    if not num_epochs > 0:
        raise ValueError(f"num_epochs={num_epochs}: must be above 0")
    num_batches = int(num_examples / global_batch * num_epochs)
    if num_batches < 1:
        raise ValueError(
            f"{num_examples} examples x {num_epochs} epochs make no global batch of "
            f"{global_batch} (batch_size {batch_size} x {process_count} processes)"
        )
    (done,) = check_position(position, len(POSITION_FIELDS)) or (0,)
    if done > num_batches:
        raise PositionError(f"stream position [{done}]: there are only {num_batches} batches")
    epochs = -(-num_batches * global_batch // num_examples)
    seed = seed % 2**63

    # Graph code only: autograph's rewrite of Python source costs seconds at every program start.
    @tf.autograph.experimental.do_not_convert
    def permutation(epoch):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_examples, dtype=tf.int32),
            seed=tf.stack([tf.constant(seed, tf.int64), epoch]),
        )
        return tf.data.Dataset.from_tensor_slices(order)

    # Indices only up to here, so skipping to a position costs next to nothing.
    first_epoch, skip = divmod(done * global_batch, num_examples)
    dataset = tf.data.Dataset.range(first_epoch, epochs).flat_map(permutation).skip(skip)
    dataset = dataset.batch(global_batch, drop_remainder=True).take(num_batches - done)

    bucket_tables = [tf.constant(np.asarray(bucket, np.int32)) for bucket in buckets]

    @tf.autograph.experimental.do_not_convert
    def rows(after, order):
        return (
            order[start : start + batch_size],
            tf.ones([batch_size], tf.float32),
            tf.fill([batch_size, 1], after),
            *(tf.reduce_max(tf.gather(table, order)) for table in bucket_tables),
        )

    dataset = dataset.enumerate(done + 1).map(rows)
    return dataset, SplitInfo(num_examples, global_batch, num_batches)


def bucket_lengths(length: int, count: int) -> tuple[int, ...]:
    """The lengths texts cut to `length` tokens are padded to, shortest first: `length`
    and up to `count - 1` halvings of it, each rounded up to a multiple of 8 (and no
    shorter than 8)."""
    halvings = (max(8, -(-length // 2**k // 8) * 8) for k in range(1, count))
    return tuple(sorted({length, *(h for h in halvings if h < length)}))


def power_of_two_width(tokens: int, length: int) -> int:
    """The width a batch whose longest text has `tokens` is padded to outside training
    (embedding, fill-mask): a power of two from 16, or `length`, so that one compile
    serves texts of similar lengths."""
    return min(max(16, 1 << (tokens - 1).bit_length()), length)


def finish_batch(batch: dict, position: tuple, *, batch_size: int, rows: int) -> dict:
    """A batch made from batch_indices' (indices, example_weight, *position), with its static
    shapes set (`rows` rows; example_slot one per example) and, in training, its
    stream_position."""
    for name, value in batch.items():
        value.set_shape([batch_size if name == "example_slot" else rows, *value.shape[1:]])
    if position:  # training
        batch["stream_position"] = position[0]
        batch["stream_position"].set_shape([batch_size, 1])
    return batch


def packed_shape(
    lengths: np.ndarray,
    max_seq_length: int,
    *,
    split: str,
    batch_size: int,
    process_count: int = 1,
    seed: int = 0,
    num_epochs: float = 1.0,
    rows_multiple: int = 1,
) -> packing.PackShape:
    """The packed shape (data_pipeline/packing.py) that holds every batch that batch_indices
    draws for `split`, with these arguments, from examples of `lengths` tokens, on every
    process."""
    plan, _ = batch_indices(
        len(lengths),
        training=split == "train",
        batch_size=batch_size * process_count,  # the global batches, then each host's share
        process_index=0,
        process_count=1,
        seed=seed,
        num_epochs=num_epochs,
    )
    shares = (
        share
        for element in plan.as_numpy_iterator()
        for share in np.split(element[0], process_count)
    )
    return packing.pack_shape(lengths, shares, max_seq_length, rows_multiple)
