"""Sequence packing: the short examples of a batch share rows of max_seq_length tokens.

Fine-tuning sentences are often a fifth of max_seq_length long, and a padded
row costs the model as much as a full one. Krell et al. 2021 ("Efficient
sequence packing without cross-contamination", arXiv 2107.02027) pack several
examples into one row and keep each example's attention, positions and loss to
itself; the model then computes what it did on the unpacked batch, in fewer rows.

A packed batch holds the same examples as the unpacked one. They are placed
first fit decreasing: longest first, each in the first row with room for it
(ties in batch order, so a batch always packs the same way). Its columns:

    input_ids, segment_ids  [R, L]  the examples' tokens one after the other, then padding
    input_mask              [R, L]  k on the tokens of the row's k-th example (1, 2, ...),
                                    0 on padding: the model attends within each example and
                                    restarts position ids at each (bertjax/model.py)
    cls_positions           [R, K]  the first token ([CLS]) of each example; 0 in empty slots
    example_slot            [N]     where the batch's n-th example went: row * K + slot,
                                    rows counted from `first_row` (the host's first)
    and every per-example column (label, example_weight, ...) as [R, K, ...], 0 in the empty
    slots, whose example_weight 0 keeps them out of losses and scores;
    and every per-token column (a tag per token, ...) as [R, L], each value moved with its
    token, and on padding the column's own padding value (`token_padding`, else 0).

A row of one example is exactly the unpacked row (input_mask 1 on its tokens).
R and K are fixed for a run, so steps compile once: `pack_shape` packs every
batch of the run's plan (the indices only) and keeps the most rows any batch
needs, rounded up to a multiple of the devices a host's rows are split over,
and the most examples any row holds.
"""

import dataclasses
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: workers.py's processes load no TensorFlow
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class PackShape:
    rows: int  # R: rows of a packed batch (per host)
    slots: int  # K: the most examples one row holds


def first_fit_decreasing(lengths: np.ndarray, max_seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """The row, and the slot in it, of each example of `lengths` (each <= max_seq_length)."""
    rows = np.zeros(len(lengths), np.int64)
    slots = np.zeros(len(lengths), np.int64)
    used, count = [], []  # per row: tokens and examples so far
    for i in np.argsort(-np.asarray(lengths), kind="stable").tolist():
        length = int(lengths[i])
        row = next((r for r, u in enumerate(used) if u + length <= max_seq_length), len(used))
        if row == len(used):
            used.append(0)
            count.append(0)
        rows[i], slots[i] = row, count[row]
        used[row] += length
        count[row] += 1
    return rows, slots


def pack_shape(
    lengths: np.ndarray, batches: Iterable[np.ndarray], max_seq_length: int, rows_multiple: int
) -> PackShape:
    """The shape that holds every batch of example indices in `batches`, packed.

    `lengths[i]` is example i's length in tokens; every process's share of every
    batch must be among `batches`, so that all processes agree on the shape.
    """
    rows, slots = 1, 1
    for indices in batches:
        row, slot = first_fit_decreasing(lengths[indices], max_seq_length)
        if len(row):
            rows, slots = max(rows, int(row.max()) + 1), max(slots, int(slot.max()) + 1)
    rows = -(-rows // rows_multiple) * rows_multiple
    return PackShape(rows, slots)


def pack(
    tokens: dict[str, "tf.Tensor"],
    per_example: dict[str, "tf.Tensor"],
    shape: PackShape,
    *,
    pad_id: int,
    first_row: int = 0,
    per_token: dict[str, "tf.Tensor"] | None = None,
    token_padding: dict[str, int | float] | None = None,
) -> dict[str, "tf.Tensor"]:
    """A batch of N unpacked examples -> the packed batch (module docstring), in graph.

    `tokens`: input_ids, input_mask (1 on tokens, 0 on padding, tokens first) and
    segment_ids, int32 [N, L]; `per_example`: columns [N, ...] to put in slots;
    `per_token`: columns [N, L] to move with the tokens, `token_padding` their values on
    padding (0 unless named).
    """
    import tensorflow as tf

    input_mask = tokens["input_mask"]
    max_seq_length = input_mask.shape[1]
    row, offset, slot = _first_fit_decreasing_in_graph(
        tf.reduce_sum(input_mask, axis=1), shape, max_seq_length
    )
    with tf.control_dependencies(_check_plan(row, slot, shape)):
        where = tf.where(input_mask > 0)  # [T, 2]: (example, token) of every real token
    example = tf.cast(where[:, 0], tf.int32)
    target = tf.stack(
        [tf.gather(row, example), tf.gather(offset, example) + tf.cast(where[:, 1], tf.int32)],
        axis=1,
    )
    rows_shape = [shape.rows, max_seq_length]
    packed = {
        "input_ids": tf.tensor_scatter_nd_update(
            tf.fill(rows_shape, pad_id), target, tf.gather_nd(tokens["input_ids"], where)
        ),
        "segment_ids": tf.scatter_nd(
            target, tf.gather_nd(tokens["segment_ids"], where), rows_shape
        ),
        "input_mask": tf.scatter_nd(target, tf.gather(slot, example) + 1, rows_shape),
    }
    for name, values in (per_token or {}).items():
        blank = tf.cast((token_padding or {}).get(name, 0), values.dtype)
        packed[name] = tf.tensor_scatter_nd_update(
            tf.fill(rows_shape, blank), target, tf.gather_nd(values, where)
        )
    slots = tf.stack([row, slot], axis=1)
    packed["cls_positions"] = tf.scatter_nd(slots, offset, [shape.rows, shape.slots])
    packed["example_slot"] = (first_row + row) * shape.slots + slot
    for name, values in per_example.items():
        packed[name] = tf.scatter_nd(
            slots, values, tf.concat([[shape.rows, shape.slots], tf.shape(values)[1:]], 0)
        )
    return packed


def _first_fit_decreasing_in_graph(
    lengths: "tf.Tensor", shape: PackShape, max_seq_length: int
) -> tuple["tf.Tensor", "tf.Tensor", "tf.Tensor"]:
    """`first_fit_decreasing` in graph, within `shape`: each example's row, its first
    token's offset in the row and its slot, int32 [N]; row `shape.rows` where none fits."""
    import tensorflow as tf

    order = tf.argsort(-lengths, stable=True)
    zeros = tf.zeros([shape.rows], tf.int32)
    zero = tf.constant(0, tf.int32)
    _, _, placed_row, placed_offset, placed_slot = tf.scan(
        functools.partial(_place, shape=shape, max_seq_length=max_seq_length),
        tf.gather(lengths, order),
        initializer=(zeros, zeros, zero, zero, zero),
    )
    back = tf.math.invert_permutation(order)  # sorted order -> the batch's order
    return tuple(tf.gather(x, back) for x in (placed_row, placed_offset, placed_slot))


def _place(carry, length, *, shape: PackShape, max_seq_length: int):
    """One step of the first fit: (tokens and examples per row so far, and the last
    example's row, offset and slot) -> the same with the example of `length` placed."""
    import tensorflow as tf

    used, count, _, _, _ = carry
    fits = used + length <= max_seq_length
    row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
    row = tf.where(tf.reduce_any(fits), row, shape.rows)  # none fits: past the plan
    at = tf.minimum(row, shape.rows - 1)  # (then caught by `_check_plan`)
    offset, slot = tf.gather(used, at), tf.gather(count, at)
    added = tf.one_hot(at, shape.rows, dtype=tf.int32)
    return used + added * length, count + added, row, offset, slot


def _check_plan(row: "tf.Tensor", slot: "tf.Tensor", shape: PackShape) -> list["tf.Operation"]:
    """Assertions that the batch fits in `shape`: its rows and the slots of each."""
    import tensorflow as tf

    return [
        tf.debugging.assert_less(
            tf.reduce_max(row),
            shape.rows,
            message=f"a batch needs more than the {shape.rows} packed rows planned for it",
        ),
        tf.debugging.assert_less(
            tf.reduce_max(slot),
            shape.slots,
            message=f"a packed row holds more than the {shape.slots} examples planned",
        ),
    ]


# ------------------------------------------------------------ in NumPy, with budgets
# Pretraining packs sentence pairs as the stream makes them (a chunk of documents
# online, a window of records offline: data_pipeline/pretraining_input.py, tfrecords.py): no
# plan ahead, so the number of rows follows the pairs, and a row also has a budget of
# masked positions to keep.


def first_fit_decreasing_within(
    lengths: np.ndarray,
    costs: np.ndarray,
    *,
    max_seq_length: int,
    max_slots: int,
    budget: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, slot, offset) of each sequence: first fit decreasing as `first_fit_decreasing`,
    where a row also holds at most `max_slots` sequences and `costs` adding up to `budget`.

    Rows are numbered as they open, and a row's slots follow one another from offset 0.
    """
    lengths, costs = np.asarray(lengths, np.int64), np.asarray(costs, np.int64)
    too_long = (lengths > max_seq_length) | (costs > budget)
    if too_long.any():
        i = int(np.flatnonzero(too_long)[0])
        raise ValueError(
            f"sequence {i} ({lengths[i]} tokens, cost {costs[i]}) does not fit a row "
            f"of {max_seq_length} tokens and budget {budget}"
        )
    count = len(lengths)
    used, filled, spent = (np.zeros(count, np.int64) for _ in range(3))
    rows, slots, offsets = (np.zeros(count, np.int64) for _ in range(3))
    opened = 0
    for i in np.argsort(-lengths, kind="stable").tolist():
        fits = (
            (used[:opened] + lengths[i] <= max_seq_length)
            & (filled[:opened] < max_slots)
            & (spent[:opened] + costs[i] <= budget)
        )
        found = np.flatnonzero(fits)
        row = int(found[0]) if found.size else opened
        opened += not found.size
        rows[i], slots[i], offsets[i] = row, filled[row], used[row]
        used[row] += lengths[i]
        filled[row] += 1
        spent[row] += costs[i]
    return rows, slots, offsets


def pack_numpy(
    tokens: dict[str, np.ndarray],
    per_example: dict[str, np.ndarray],
    placement: tuple[np.ndarray, np.ndarray, np.ndarray],
    shape: PackShape,
    *,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """`pack` in NumPy, at a given (row, slot, offset) placement of each example
    (`first_fit_decreasing_within`); the same columns, `example_slot` counted from row 0."""
    rows, slots, offsets = (np.asarray(x, np.int64) for x in placement)
    input_mask = np.asarray(tokens["input_mask"])
    example, column = np.nonzero(input_mask)  # tokens first: a column is the token's index
    target = (rows[example], offsets[example] + column)
    length = input_mask.shape[1]
    packed = {
        "input_ids": np.full((shape.rows, length), pad_id, np.int32),
        "segment_ids": np.zeros((shape.rows, length), np.int32),
        "input_mask": np.zeros((shape.rows, length), np.int32),
    }
    packed["input_ids"][target] = np.asarray(tokens["input_ids"])[example, column]
    packed["segment_ids"][target] = np.asarray(tokens["segment_ids"])[example, column]
    packed["input_mask"][target] = slots[example] + 1
    packed["cls_positions"] = np.zeros((shape.rows, shape.slots), np.int32)
    packed["cls_positions"][rows, slots] = offsets
    packed["example_slot"] = rows * shape.slots + slots
    for name, values in per_example.items():
        values = np.asarray(values)
        packed[name] = np.zeros((shape.rows, shape.slots, *values.shape[1:]), values.dtype)
        packed[name][rows, slots] = values
    return packed


def move_predictions(
    positions: np.ndarray,
    ids: np.ndarray,
    weights: np.ndarray,
    placement: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: int,
    budget: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each example's masked positions [N, P] (where `weights` > 0; positions from its own
    start) moved into its row at its (row, slot, offset): masked_lm_positions, _ids and
    _weights [rows, budget], a row's examples in slot order. More than `budget` in a row
    raises: a packer keeps to the budget, and a prediction is never dropped."""
    row, slot, offset = (np.asarray(x, np.int64) for x in placement)
    order = np.lexsort((slot, row))  # by row, then slot
    example, column = np.nonzero(np.asarray(weights)[order] > 0)
    which = order[example]
    row_of = row[which]
    # Each prediction's index among its row's: a row's predictions are one run of `row_of`.
    index = np.arange(len(which)) - np.searchsorted(row_of, row_of)
    if len(index) and index.max() >= budget:
        raise ValueError(f"a packed row holds more than {budget} masked positions")
    out_positions = np.zeros((rows, budget), np.int32)
    out_ids = np.zeros((rows, budget), np.int32)
    out_weights = np.zeros((rows, budget), np.float32)
    out_positions[row_of, index] = np.asarray(positions)[which, column] + offset[which]
    out_ids[row_of, index] = np.asarray(ids)[which, column]
    out_weights[row_of, index] = 1.0
    return out_positions, out_ids, out_weights


def pack_pairs(
    pairs: dict[str, np.ndarray],
    costs: np.ndarray,
    *,
    max_slots: int,
    budget: int,
    pad_id: int,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Pretraining sentence pairs [N, ...] (data_pipeline/schema.py's FEATURES, masked or
    not yet) -> packed rows [R, ...] (schema.py's packed features).

    First fit decreasing, a row taking at most `max_slots` pairs and `budget` masked
    positions (`costs`: each pair's). The rows come in an order drawn from `rng`: first
    fit decreasing opens them longest pair first. The masked_lm features, when `pairs`
    has them, move with their pairs (`move_predictions`); so do next_sentence_labels,
    which sequences of masked LM alone have not.
    """
    lengths = np.asarray(pairs["input_mask"]).sum(axis=1)
    placement = first_fit_decreasing_within(
        lengths,
        costs,
        max_seq_length=np.asarray(pairs["input_mask"]).shape[1],
        max_slots=max_slots,
        budget=budget,
    )
    rows = int(placement[0].max()) + 1 if len(lengths) else 0
    placement = (rng.permutation(rows)[placement[0]], *placement[1:])
    tokens = {name: pairs[name] for name in ("input_ids", "input_mask", "segment_ids")}
    per_pair = {}
    if "next_sentence_labels" in pairs:  # not of masked LM alone
        per_pair["next_sentence_labels"] = np.asarray(pairs["next_sentence_labels"]).reshape(-1)
    per_pair["next_sentence_weights"] = np.ones(len(lengths), np.float32)
    packed = pack_numpy(tokens, per_pair, placement, PackShape(rows, max_slots), pad_id=pad_id)
    del packed["example_slot"]
    if "masked_lm_weights" in pairs:
        moved = move_predictions(
            pairs["masked_lm_positions"],
            pairs["masked_lm_ids"],
            pairs["masked_lm_weights"],
            placement,
            rows,
            budget,
        )
        names = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
        packed.update(zip(names, moved, strict=True))
    return packed
