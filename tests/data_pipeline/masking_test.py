"""Masked-LM statistics over thousands of sequences, against the original's rules."""

import numpy as np
import pytest

from data_pipeline import masking

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
VOCAB = 1000
# Ids 5..9 play [unused*]: special, never drawn as random replacements.
RANDOM_IDS = np.arange(10, VOCAB, dtype=np.int32)
# Ids >= 500 play "##" continuation pieces.
CONTINUATION = np.arange(VOCAB) >= 500


def spec(**overrides):
    values = dict(
        max_predictions_per_seq=20,
        masked_lm_prob=0.15,
        mask_token_prob=0.8,
        random_token_prob=0.1,
        whole_word_mask=False,
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
        mask_id=MASK,
        random_token_ids=RANDOM_IDS,
        is_continuation=CONTINUATION,
    )
    values.update(overrides)
    return masking.MaskingSpec(**values)


def packed_batch(batch=4000, length=128, seed=0, max_piece=500):
    """[CLS] A [SEP] B [SEP] + padding with random lengths and ordinary tokens."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, length), np.int32)
    mask = np.zeros((batch, length), np.int32)
    for row in range(batch):
        n = int(rng.integers(5, length + 1))
        a = int(rng.integers(1, n - 3))
        tokens = rng.integers(10, max_piece, size=n).astype(np.int32)
        tokens[0], tokens[a + 1], tokens[n - 1] = CLS, SEP, SEP
        ids[row, :n] = tokens
        mask[row, :n] = 1
    return ids, mask


def test_num_to_predict_rule():
    s = spec()
    lengths = np.array([5, 6, 10, 13, 20, 100, 128, 200])
    # min(20, max(1, round(n * 0.15))), Python's round (half to even).
    expected = [min(20, max(1, round(n * 0.15))) for n in lengths]
    np.testing.assert_array_equal(masking.num_to_predict(lengths, s), expected)


def test_token_masking_statistics():
    ids, mask = packed_batch()
    out = masking.mask_batch(ids, mask, spec(), np.random.default_rng(1))
    weights = out["masked_lm_weights"]
    positions = out["masked_lm_positions"]
    lengths = mask.sum(1)
    counts = weights.sum(1).astype(int)
    np.testing.assert_array_equal(counts, masking.num_to_predict(lengths, spec()))
    # About 15% of the tokens are predicted (the max(1, .) rule and the cap aside).
    assert counts.sum() / lengths.sum() == pytest.approx(0.15, abs=0.01)

    valid = weights > 0
    rows = np.nonzero(valid)[0]
    at = positions[valid]
    original = ids[rows, at]
    now = out["input_ids"][rows, at]
    # Labels are the original tokens; specials and padding are never chosen.
    np.testing.assert_array_equal(out["masked_lm_ids"][valid], original)
    assert not np.isin(original, [CLS, SEP, PAD]).any()
    assert (mask[rows, at] == 1).all()
    # Sorted, distinct positions; padding slots are zero with weight zero.
    for row in range(len(ids)):
        p = positions[row][valid[row]]
        assert (np.diff(p) > 0).all()
    assert (positions[~valid] == 0).all() and (out["masked_lm_ids"][~valid] == 0).all()
    # 80% [MASK], 10% random, 10% unchanged.
    share_mask = np.mean(now == MASK)
    share_same = np.mean(now == original)
    share_random = 1 - share_mask - share_same
    assert share_mask == pytest.approx(0.8, abs=0.01)
    # A random draw can hit the original token (1 in 990), counted as "same".
    assert share_same == pytest.approx(0.1, abs=0.01)
    assert share_random == pytest.approx(0.1, abs=0.01)
    replaced = now[(now != MASK) & (now != original)]
    assert np.isin(replaced, RANDOM_IDS).all(), "random tokens come from non-special ids"
    # Nothing but the chosen positions changed.
    changed = out["input_ids"] != ids
    assert not (changed & ~np.isin(np.arange(ids.shape[1])[None, :], positions)).any()


def test_positions_are_uniform_over_candidates():
    # 4000 full rows [CLS] x*14 [SEP] x*15 [SEP]: 29 candidates, 5 predictions each.
    rng = np.random.default_rng(2)
    ids = rng.integers(10, 500, size=(4000, 32)).astype(np.int32)
    ids[:, 0], ids[:, 15], ids[:, 31] = CLS, SEP, SEP
    mask = np.ones_like(ids)
    out = masking.mask_batch(ids, mask, spec(), np.random.default_rng(3))
    hits = np.bincount(out["masked_lm_positions"][out["masked_lm_weights"] > 0], minlength=32)
    assert hits[[0, 15, 31]].sum() == 0
    expected = 4000 * 5 / 29
    candidates = np.delete(hits, [0, 15, 31])
    assert np.abs(candidates / expected - 1).max() < 0.15


def test_masking_is_deterministic_for_a_seed():
    ids, mask = packed_batch(batch=64)
    a = masking.mask_batch(ids, mask, spec(), np.random.default_rng(5))
    b = masking.mask_batch(ids, mask, spec(), np.random.default_rng(5))
    c = masking.mask_batch(ids, mask, spec(), np.random.default_rng(6))
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["masked_lm_positions"], c["masked_lm_positions"])


def test_whole_word_masking_masks_whole_words_with_one_draw():
    # Ids 10..499 start a word, 500..999 continue it.
    ids, mask = packed_batch(batch=3000, seed=4, max_piece=VOCAB)
    s = spec(whole_word_mask=True)
    out = masking.mask_batch(ids, mask, s, np.random.default_rng(7))
    weights, positions = out["masked_lm_weights"], out["masked_lm_positions"]
    counts = weights.sum(1)
    wanted = masking.num_to_predict(mask.sum(1), s)
    assert (counts <= wanted).all()
    assert counts.mean() > 0.9 * wanted.mean()
    mask_words = same_words = 0
    for row in range(len(ids)):
        chosen = set(positions[row][weights[row] > 0].tolist())
        # Every word is all in or all out.
        for start in range(1, mask[row].sum() - 1):
            if (
                ids[row, start] in (CLS, SEP)
                or CONTINUATION[ids[row, start]]
                and ids[row, start - 1] not in (CLS, SEP)
            ):
                continue
            end = start + 1
            while end < mask[row].sum() and CONTINUATION[ids[row, end]]:
                end += 1
            word = set(range(start, end))
            inside = word & chosen
            assert not inside or inside == word, (row, start, end)
            if inside and len(word) > 1:
                now = out["input_ids"][row, sorted(word)]
                if (now == MASK).all():
                    mask_words += 1
                elif (now == ids[row, sorted(word)]).all():
                    same_words += 1
                else:
                    # Random replacement: no piece is [MASK] and the draw is shared.
                    assert not (now == MASK).any()
    multi = mask_words + same_words
    assert multi > 0 and mask_words / multi == pytest.approx(0.8 / 0.9, abs=0.03)


def test_short_sequence_gets_one_prediction():
    ids = np.array([[CLS, 11, SEP, 12, SEP, 0, 0, 0]], np.int32)
    mask = (ids != 0).astype(np.int32)
    out = masking.mask_batch(ids, mask, spec(), np.random.default_rng(0))
    assert out["masked_lm_weights"].sum() == 1
    assert out["masked_lm_positions"][0, 0] in (1, 3)
