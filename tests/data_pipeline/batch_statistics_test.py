"""data_pipeline.batch_statistics: running totals over small hand-made batches, their summary
and its text, and one example shown with its masked tokens."""

import numpy as np
import pytest

from data_pipeline import batch_statistics
from data_pipeline.vocab import wordpiece_vocab

TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "##s", "on")
VOCAB = wordpiece_vocab("test-vocab", TOKENS)
PAD, CLS, SEP, MASK, THE, CAT, SAT, DOG, S, ON = 0, 2, 3, 4, 5, 6, 7, 8, 9, 10
L, P = 8, 2  # max_seq_length, max_predictions_per_seq


def batch() -> dict:
    """Four rows of lengths 7, 5, 8 and 3. Row 0: "cat" as [MASK] and "on" kept (P of them,
    at the cap); row 1: "dog" replaced by "cat"; row 2: a [SEP] as [MASK]; row 3: none."""
    return {
        "input_ids": np.array(
            [
                [CLS, THE, MASK, SEP, SAT, ON, SEP, PAD],
                [CLS, CAT, SEP, THE, SEP, PAD, PAD, PAD],
                [CLS, THE, DOG, S, MASK, SAT, ON, SEP],
                [CLS, SEP, SEP, PAD, PAD, PAD, PAD, PAD],
            ],
            np.int32,
        ),
        "input_mask": np.array(
            [[1] * 7 + [0], [1] * 5 + [0] * 3, [1] * 8, [1] * 3 + [0] * 5], np.int32
        ),
        "segment_ids": np.array(
            [
                [0, 0, 0, 0, 1, 1, 1, 0],
                [0, 0, 0, 1, 1, 0, 0, 0],
                [0, 0, 0, 0, 0, 1, 1, 1],
                [0, 0, 0, 0, 0, 0, 0, 0],
            ],
            np.int32,
        ),
        "masked_lm_positions": np.array([[2, 5], [1, 0], [4, 0], [0, 0]], np.int32),
        "masked_lm_ids": np.array([[CAT, ON], [DOG, 0], [SEP, 0], [0, 0]], np.int32),
        "masked_lm_weights": np.array([[1, 1], [1, 0], [1, 0], [0, 0]], np.float32),
        "next_sentence_labels": np.array([0, 1, 1, 0], np.int32),
    }


def rows(b: dict, index) -> dict:
    return {name: value[index] for name, value in b.items()}


EXPECTED_SUMMARY = {
    "sequences": 4,
    "tokens": 23,
    "length_mean": 5.75,
    "length_min": 3,
    "length_p50": 6.0,
    "length_max": 8,
    "share_full_length": 0.25,
    "share_short": 0.25,  # length 3 < 8 // 2
    "share_not_next": 0.5,
    "predictions_per_sequence": 1.0,
    "share_tokens_predicted": 4 / 23,
    "share_sequences_at_prediction_cap": 0.25,
    "share_mask_token": 0.5,
    "share_random_token": 0.25,
    "share_unchanged": 0.25,
    "specials_predicted": 1,
    "share_padding": 9 / 32,
}


def test_update_counts_each_total_of_a_hand_made_batch():
    stats = batch_statistics.BatchStatistics(L, P)
    stats.update(batch(), VOCAB)
    assert (stats.sequences, stats.tokens, stats.short_sequences, stats.not_next) == (4, 23, 1, 2)
    assert (stats.predictions, stats.predictions_at_cap) == (4, 1)
    assert (stats.as_mask, stats.as_random, stats.as_same) == (2, 1, 1)
    assert stats.specials_predicted == 1
    np.testing.assert_array_equal(stats.length_histogram, [0, 0, 0, 1, 0, 1, 0, 1, 1])
    assert stats.length_histogram.dtype == np.int64


def test_summary_of_a_hand_made_batch():
    stats = batch_statistics.BatchStatistics(L, P)
    stats.update(batch(), VOCAB)
    summary = stats.summary()
    assert summary.keys() == EXPECTED_SUMMARY.keys()
    assert summary == pytest.approx(EXPECTED_SUMMARY, rel=1e-12)


def test_two_half_batches_add_up_to_the_whole():
    whole = batch_statistics.BatchStatistics(L, P)
    whole.update(batch(), VOCAB)
    halves = batch_statistics.BatchStatistics(L, P)
    halves.update(rows(batch(), slice(0, 2)), VOCAB)
    assert (halves.sequences, halves.tokens, halves.as_random) == (2, 12, 1)
    halves.update(rows(batch(), slice(2, 4)), VOCAB)
    assert halves.summary() == whole.summary()
    np.testing.assert_array_equal(halves.length_histogram, whole.length_histogram)


def test_predictions_with_weight_0_are_not_counted():
    b = batch()
    b["masked_lm_weights"][:] = 0
    stats = batch_statistics.BatchStatistics(L, P)
    stats.update(b, VOCAB)
    assert (stats.predictions, stats.predictions_at_cap, stats.specials_predicted) == (0, 0, 0)
    assert (stats.as_mask, stats.as_random, stats.as_same) == (0, 0, 0)
    assert stats.tokens == 23
    summary = stats.summary()
    assert summary["share_mask_token"] == summary["share_tokens_predicted"] == 0.0


def test_summary_before_any_batch_is_zeros():
    summary = batch_statistics.BatchStatistics(L, P).summary()
    assert summary["sequences"] == summary["tokens"] == summary["specials_predicted"] == 0
    assert (summary["length_mean"], summary["length_min"], summary["length_max"]) == (0.0, 0, 0)
    assert summary["length_p50"] == summary["share_not_next"] == summary["share_short"] == 0.0
    assert summary["predictions_per_sequence"] == summary["share_unchanged"] == 0.0


def test_format_summary_of_a_hand_made_batch():
    stats = batch_statistics.BatchStatistics(L, P)
    stats.update(batch(), VOCAB)
    assert batch_statistics.format_summary(stats.summary()).splitlines() == [
        "sequences            4 (23 tokens)",
        "length               mean 5.8, median 6, min 3, max 8; 25.0% full length",
        "short (< half max)   25.0%",
        "NSP                  50.0% NotNext, 50.0% IsNext",
        "masked per sequence  1.00 (17.4% of tokens; 25.0% of sequences at the cap)",
        "masked as            50.0% [MASK], 25.0% random, 25.0% unchanged",
        "specials masked      1",
        "padding              28.1% of positions",
    ]


def test_format_summary_adds_the_corpus_counts():
    stats = batch_statistics.BatchStatistics(L, P)
    stats.update(batch(), VOCAB)
    corpus_stats = {
        "documents_read": 1234,
        "documents_in_other_split": 56,
        "sentences_read": 78901,
        "files_read": 2,
        "empty_lines_skipped": 3,
        "invalid_bytes": 4,
        "control_characters": 5,
        "long_lines_cut": 6,
        "long_line_bytes_skipped": 7890,
    }
    lines = batch_statistics.format_summary(stats.summary(), corpus_stats).splitlines()
    assert len(lines) == 11
    assert lines[8:10] == [
        "documents read       1,234 (all passes, read-ahead included; 56 belong to the other "
        "split), 78,901 sentences, 2 files",
        "skipped              3 empty lines, 4 invalid UTF-8 bytes, 5 control characters",
    ]
    assert (
        lines[10] == "cut                  6 lines longer than 65,536 bytes (7,890 bytes skipped)"
    )


def test_format_example_shows_a_mask_and_a_kept_token_by_segment():
    assert batch_statistics.format_example(rows(batch(), 0), VOCAB) == (
        "IsNext, 7 tokens, 2 masked\n  A: [CLS] the [MASK]{cat} [SEP]\n  B: sat ={on} [SEP]"
    )


def test_format_example_shows_a_random_replacement_and_not_next():
    assert batch_statistics.format_example(rows(batch(), 1), VOCAB) == (
        "NotNext, 5 tokens, 1 masked\n  A: [CLS] ~cat{dog} [SEP]\n  B: the [SEP]"
    )


def test_format_example_leaves_out_padding_and_predictions_of_weight_0():
    assert batch_statistics.format_example(rows(batch(), 3), VOCAB) == (
        "IsNext, 3 tokens, 0 masked\n  A: [CLS] [SEP] [SEP]\n  B: "
    )


def test_masked_lm_alone_has_no_nsp_line_and_one_segment_per_example():
    b = batch()
    del b["next_sentence_labels"]  # masked LM alone: no NSP labels
    stats = batch_statistics.BatchStatistics(L, P, next_sentence=False)
    stats.update(b, VOCAB)
    summary = stats.summary()
    assert summary["share_not_next"] is None
    lines = batch_statistics.format_summary(summary).splitlines()
    assert not [line for line in lines if line.startswith("NSP")]
    example = {
        "input_ids": np.array([CLS, THE, MASK, SAT, SEP, 0, 0, 0]),
        "input_mask": np.array([1, 1, 1, 1, 1, 0, 0, 0]),
        "segment_ids": np.zeros(8, np.int32),
        "masked_lm_positions": np.array([2, 0]),
        "masked_lm_ids": np.array([CAT, 0]),
        "masked_lm_weights": np.array([1.0, 0.0]),
    }
    assert batch_statistics.format_example(example, VOCAB) == (
        "5 tokens, 1 masked\n  A: [CLS] the [MASK]{cat} sat [SEP]"
    )
