"""data_pipeline.schema: the feature names, per-row shapes and dtypes of a pretraining batch,
packed and not, and the tables of its docstring that document them."""

import re

import numpy as np

from data_pipeline import schema

UNPACKED = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def test_an_unpacked_batch_holds_bert_s_seven_features_in_order():
    assert schema.FEATURES == UNPACKED
    assert schema.features(packed=False) == UNPACKED


def test_a_packed_batch_adds_next_sentence_weights_and_cls_positions():
    assert schema.PACKED_FEATURES == ("next_sentence_weights", "cls_positions")
    assert schema.features(packed=True) == (*UNPACKED, "next_sentence_weights", "cls_positions")


def test_per_row_shapes_of_an_unpacked_batch():
    assert schema.feature_shapes(128, 20) == {
        "input_ids": (128,),
        "input_mask": (128,),
        "segment_ids": (128,),
        "masked_lm_positions": (20,),
        "masked_lm_ids": (20,),
        "masked_lm_weights": (20,),
        "next_sentence_labels": (),
    }


def test_per_row_shapes_of_packed_rows_give_each_slot_its_label_weight_and_cls():
    assert schema.feature_shapes(64, 10, slots=3) == {
        "input_ids": (64,),
        "input_mask": (64,),
        "segment_ids": (64,),
        "masked_lm_positions": (10,),
        "masked_lm_ids": (10,),
        "masked_lm_weights": (10,),
        "next_sentence_labels": (3,),
        "next_sentence_weights": (3,),
        "cls_positions": (3,),
    }


def test_shapes_name_exactly_the_features_of_their_batch():
    assert tuple(schema.feature_shapes(16, 4)) == schema.features(packed=False)
    assert tuple(schema.feature_shapes(16, 4, slots=2)) == schema.features(packed=True)


def test_weights_are_float32_and_every_other_feature_int32():
    dtypes = {name: schema.feature_dtype(name) for name in schema.features(packed=True)}
    assert dtypes == {
        "input_ids": np.int32,
        "input_mask": np.int32,
        "segment_ids": np.int32,
        "masked_lm_positions": np.int32,
        "masked_lm_ids": np.int32,
        "masked_lm_weights": np.float32,
        "next_sentence_labels": np.int32,
        "next_sentence_weights": np.float32,
        "cls_positions": np.int32,
    }
    assert all(isinstance(dtype, np.dtype) for dtype in dtypes.values())


def _documented() -> list[dict[str, tuple[str, str]]]:
    """The docstring's tables: feature -> (dtype, shape) for each, in order."""
    tables, table = [], None
    for line in schema.__doc__.splitlines():
        row = re.match(r"\| (\w+) +\| (\w+) +\| (\[[^]]*\]) +\|", line)
        if row and row[1] != "feature":
            table[row[1]] = (row[2], row[3])
        elif line.startswith("| feature"):
            table = {}
            tables.append(table)
    return tables


def _row_shape(documented: str) -> tuple[int, ...]:
    """`[B, L]` as a per-row shape: the batch axis dropped, L, P and K made numbers."""
    sizes = {"L": 12, "P": 5, "K": 3}
    return tuple(sizes[axis] for axis in documented[1:-1].split(", ")[1:])


def test_the_docstring_tables_agree_with_the_shapes_and_dtypes():
    unpacked, packed = _documented()
    assert tuple(unpacked) == schema.FEATURES
    # The packed table: the features whose meaning or shape a packed row changes.
    assert tuple(packed) == (
        "input_mask",
        "masked_lm_positions",
        "next_sentence_labels",
        *schema.PACKED_FEATURES,
    )
    for table, shapes in (
        (unpacked, schema.feature_shapes(12, 5)),
        (packed, schema.feature_shapes(12, 5, slots=3)),
    ):
        for name, (dtype, shape) in table.items():
            assert np.dtype(dtype) == schema.feature_dtype(name), name
            assert _row_shape(shape) == shapes[name], name
