"""bertjax.bench.throughput's synthetic batches: the pretraining schema's columns, shapes
and dtypes, unpacked and packed. (measure() compiles and times a real train step; the
test of its report in tests/bertjax/flops_test.py runs it.)"""

import numpy as np
import pytest

from bertjax.bench import throughput
from data_pipeline import schema


@pytest.mark.parametrize("slots", [0, 3], ids=["unpacked", "packed"])
def test_a_synthetic_batch_has_the_schemas_columns_shapes_and_dtypes(slots):
    batch = throughput.synthetic_batch(4, 16, 5, 50, sequences_per_row=slots)
    shapes = schema.feature_shapes(16, 5, slots)
    assert sorted(batch) == sorted(schema.features(bool(slots)))
    for name, value in batch.items():
        assert value.shape == (4, *shapes[name]), name
        assert value.dtype == schema.feature_dtype(name), name


def test_unpacked_rows_are_full_pairs_with_masks_inside_them():
    batch = throughput.synthetic_batch(4, 16, 5, 50, seed=3)
    assert batch["input_mask"].min() == 1  # no padding
    np.testing.assert_array_equal(batch["segment_ids"][0], [0] * 8 + [1] * 8)
    ids, targets = batch["input_ids"], batch["masked_lm_ids"]
    assert ids.min() >= 5 and ids.max() < 50  # never a special token
    assert targets.min() >= 5 and targets.max() < 50
    positions = batch["masked_lm_positions"]
    assert positions.min() >= 1 and positions.max() <= 14  # not [CLS], not the last token
    assert np.all(np.diff(positions, axis=1) >= 0)
    np.testing.assert_array_equal(batch["masked_lm_weights"], np.ones((4, 5)))
    assert set(np.unique(batch["next_sentence_labels"])) <= {0, 1}


def test_the_same_seed_gives_the_same_batch_and_another_seed_another():
    first, again = (throughput.synthetic_batch(2, 16, 3, 50, seed=1) for _ in range(2))
    other = throughput.synthetic_batch(2, 16, 3, 50, seed=2)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["input_ids"], other["input_ids"])


def test_packed_rows_hold_equal_sequences_the_last_taking_the_rest():
    # 16 tokens, 3 sequences: 5, 5 and 6 tokens, each a pair split at its middle.
    batch = throughput.synthetic_batch(2, 16, 4, 50, sequences_per_row=3)
    np.testing.assert_array_equal(batch["input_mask"][1], [1] * 5 + [2] * 5 + [3] * 6)
    np.testing.assert_array_equal(batch["segment_ids"][1], [0, 0, 1, 1, 1] * 2 + [0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch["cls_positions"], [[0, 5, 10], [0, 5, 10]])
    np.testing.assert_array_equal(batch["next_sentence_weights"], np.ones((2, 3)))
    assert batch["next_sentence_labels"].shape == (2, 3)
