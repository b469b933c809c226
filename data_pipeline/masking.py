"""Masked-LM targets for a batch of packed sequences, as BERT's create_masked_lm_predictions.

Per sequence: `num_to_predict = min(max_predictions_per_seq, max(1, round(n *
masked_lm_prob)))` with `n` counting [CLS] and [SEP]; [CLS], [SEP] and [PAD]
are never candidates; the chosen positions become [MASK] (80%), a random
non-special token (10%) or stay (10%), and are returned sorted, padded with
weight 0 up to `max_predictions_per_seq`.

Token masking is vectorised over the batch: a uniformly random subset of the
candidates, the same distribution as the original's shuffle-then-take. Whole
word masking walks shuffled words per sequence, skipping a word that would
overshoot `num_to_predict`, like the original, with one 80/10/10 draw per word
(a bertjax decision: docs/reference.md#masking).
"""

import dataclasses

import numpy as np

from data_pipeline import packing


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    max_predictions_per_seq: int
    masked_lm_prob: float
    mask_token_prob: float
    random_token_prob: float
    whole_word_mask: bool
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    # int32 [V'] ids a random replacement is drawn from (non-special tokens).
    random_token_ids: np.ndarray
    # bool [V]: the token continues the previous token's word (WordPiece "##").
    is_continuation: np.ndarray


def num_to_predict(lengths: np.ndarray, spec: MaskingSpec) -> np.ndarray:
    # np.rint rounds half to even, as Python's round() in the original.
    wanted = np.maximum(1, np.rint(lengths * spec.masked_lm_prob).astype(np.int64))
    return np.minimum(spec.max_predictions_per_seq, wanted)


def mask_batch(
    input_ids: np.ndarray, input_mask: np.ndarray, spec: MaskingSpec, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Masks `input_ids` [B, L]; returns the masked ids and the three masked_lm features."""
    input_ids = np.asarray(input_ids, np.int32)
    input_mask = np.asarray(input_mask, np.int32)
    candidates = (
        (input_mask > 0)
        & (input_ids != spec.cls_id)
        & (input_ids != spec.sep_id)
        & (input_ids != spec.pad_id)
    )
    wanted = num_to_predict(input_mask.sum(axis=1), spec)
    if spec.whole_word_mask:
        chosen, groups = _choose_whole_words(input_ids, candidates, wanted, spec, rng)
    else:
        chosen, groups = _choose_tokens(candidates, wanted, spec, rng)
    return _apply(input_ids, chosen, groups, spec, rng)


def mask_packed_batch(
    input_ids: np.ndarray, input_mask: np.ndarray, spec: MaskingSpec, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """`mask_batch` of packed rows (input_mask k on the row's k-th sequence): each sequence is
    masked as `mask_batch` masks it alone, and its positions are moved to where it sits in
    the row. A row's predictions, its sequences' in order, must fit max_predictions_per_seq
    (the packer keeps to it: data_pipeline/pretraining_input.py); a row they overflow raises."""
    input_ids = np.asarray(input_ids, np.int32)
    input_mask = np.asarray(input_mask, np.int32)
    rows, length = input_ids.shape
    row, column = np.nonzero(input_mask)
    # One key per (row, sequence), in row order and within a row in order of position.
    keys, first, sequence = np.unique(
        row * (length + 1) + input_mask[row, column], return_index=True, return_inverse=True
    )
    start = column[first]
    at = (sequence, column - start[sequence])  # each token in its sequence, alone
    alone_ids = np.zeros((len(keys), length), np.int32)
    alone_mask = np.zeros((len(keys), length), np.int32)
    alone_ids[at] = input_ids[row, column]
    alone_mask[at] = 1
    alone = mask_batch(alone_ids, alone_mask, spec, rng)
    masked = input_ids.copy()
    masked[row, column] = alone["input_ids"][at]

    # Sequence n of the batch sits in its row at slot (its id - 1) from `start`.
    placement = (keys // (length + 1), keys % (length + 1) - 1, start)
    moved = packing.move_predictions(
        alone["masked_lm_positions"],
        alone["masked_lm_ids"],
        alone["masked_lm_weights"],
        placement,
        rows,
        spec.max_predictions_per_seq,
    )
    names = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
    return {"input_ids": masked, **dict(zip(names, moved, strict=True))}


def _choose_tokens(candidates, wanted, spec, rng):
    """[B, P] chosen positions (sorted, -1 = none); each position is its own draw group."""
    batch, length = candidates.shape
    predictions = spec.max_predictions_per_seq
    # A random key per position, non-candidates last: the first k keys in order
    # are a uniform random k-subset of the candidates.
    keys = rng.random((batch, length))
    keys[~candidates] = 2.0
    order = np.argsort(keys, axis=1, kind="stable")[:, :predictions]
    if length < predictions:
        order = np.pad(order, ((0, 0), (0, predictions - length)), constant_values=length)
    count = np.minimum(wanted, candidates.sum(axis=1))
    valid = np.arange(predictions)[None, :] < count[:, None]
    chosen = np.where(valid, order, length)
    chosen.sort(axis=1)
    chosen[chosen == length] = -1
    groups = np.where(chosen >= 0, np.arange(predictions)[None, :], -1)
    return chosen, groups


def _choose_whole_words(input_ids, candidates, wanted, spec, rng):
    """Like the original: shuffle the words, take each that still fits, skip one that overshoots."""
    batch = input_ids.shape[0]
    predictions = spec.max_predictions_per_seq
    continues = spec.is_continuation[input_ids] & candidates
    chosen = np.full((batch, predictions), -1, np.int64)
    groups = np.full((batch, predictions), -1, np.int64)
    for row in range(batch):
        positions = np.flatnonzero(candidates[row])
        if positions.size == 0:
            continue
        # A word starts at a candidate that does not continue the candidate before it.
        follows = np.zeros(positions.size, bool)
        follows[1:] = continues[row, positions[1:]] & (positions[1:] == positions[:-1] + 1)
        starts = np.flatnonzero(~follows)
        ends = np.append(starts[1:], positions.size)
        picked: list[tuple[int, int]] = []
        total = 0
        limit = int(wanted[row])
        for word in rng.permutation(starts.size):
            if total >= limit:
                break
            size = int(ends[word] - starts[word])
            if total + size > limit:
                continue
            picked.append((starts[word], ends[word]))
            total += size
        picked.sort()
        slot = 0
        for group, (start, end) in enumerate(picked):
            for position in positions[start:end]:
                chosen[row, slot] = position
                groups[row, slot] = group
                slot += 1
    return chosen, groups


def _apply(input_ids, chosen, groups, spec, rng):
    batch, predictions = chosen.shape
    valid = chosen >= 0
    rows = np.broadcast_to(np.arange(batch)[:, None], chosen.shape)
    safe = np.where(valid, chosen, 0)
    labels = np.where(valid, input_ids[rows, safe], 0).astype(np.int32)
    # One draw per group: a token under token masking, a whole word under
    # whole word masking (all its pieces share the draw).
    draws = rng.random((batch, predictions))
    draw = np.take_along_axis(draws, np.maximum(groups, 0), axis=1)
    use_mask = draw < spec.mask_token_prob
    use_random = ~use_mask & (draw < spec.mask_token_prob + spec.random_token_prob)
    random_tokens = spec.random_token_ids[
        rng.integers(0, spec.random_token_ids.size, size=(batch, predictions))
    ]
    replacement = np.where(use_mask, spec.mask_id, np.where(use_random, random_tokens, labels))
    masked = input_ids.copy()
    masked[rows[valid], chosen[valid]] = replacement[valid]
    return {
        "input_ids": masked,
        "masked_lm_positions": np.where(valid, chosen, 0).astype(np.int32),
        "masked_lm_ids": labels,
        "masked_lm_weights": valid.astype(np.float32),
    }
