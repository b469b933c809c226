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
    slots, whose example_weight 0 keeps them out of losses and scores.

A row of one example is exactly the unpacked row (input_mask 1 on its tokens).
R and K are fixed for a run, so steps compile once: `pack_shape` packs every
batch of the run's plan (the indices only) and keeps the most rows any batch
needs, rounded up to a multiple of the devices a host's rows are split over,
and the most examples any row holds.
"""

import dataclasses
from collections.abc import Iterable

import numpy as np
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
    tokens: dict[str, tf.Tensor],
    per_example: dict[str, tf.Tensor],
    shape: PackShape,
    *,
    pad_id: int,
    first_row: int = 0,
) -> dict[str, tf.Tensor]:
    """A batch of N unpacked examples -> the packed batch (module docstring), in graph.

    `tokens`: input_ids, input_mask (1 on tokens, 0 on padding, tokens first) and
    segment_ids, int32 [N, L]; `per_example`: columns [N, ...] to put in slots.
    """
    input_mask = tokens["input_mask"]
    max_seq_length = input_mask.shape[1]
    lengths = tf.reduce_sum(input_mask, axis=1)
    order = tf.argsort(-lengths, stable=True)

    def place(carry, length):
        used, count, _, _, _ = carry
        fits = used + length <= max_seq_length
        row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
        row = tf.where(tf.reduce_any(fits), row, shape.rows)  # none fits: past the plan
        at = tf.minimum(row, shape.rows - 1)  # (then caught by the checks below)
        offset, slot = tf.gather(used, at), tf.gather(count, at)
        added = tf.one_hot(at, shape.rows, dtype=tf.int32)
        return used + added * length, count + added, row, offset, slot

    zeros = tf.zeros([shape.rows], tf.int32)
    zero = tf.constant(0, tf.int32)
    _, _, placed_row, placed_offset, placed_slot = tf.scan(
        place, tf.gather(lengths, order), initializer=(zeros, zeros, zero, zero, zero)
    )
    back = tf.math.invert_permutation(order)  # sorted order -> the batch's order
    row, offset, slot = (tf.gather(x, back) for x in (placed_row, placed_offset, placed_slot))
    checks = [
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
    with tf.control_dependencies(checks):
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
    slots = tf.stack([row, slot], axis=1)
    packed["cls_positions"] = tf.scatter_nd(slots, offset, [shape.rows, shape.slots])
    packed["example_slot"] = (first_row + row) * shape.slots + slot
    for name, values in per_example.items():
        packed[name] = tf.scatter_nd(
            slots, values, tf.concat([[shape.rows, shape.slots], tf.shape(values)[1:]], 0)
        )
    return packed
