"""The pretraining batch schema, documented once.

Every batch, from the online pipeline or from offline TFRecords, is a dict of
these features with a leading batch axis B (this host's share):

| feature               | dtype   | shape    | meaning                                          |
|-----------------------|---------|----------|--------------------------------------------------|
| input_ids             | int32   | [B, L]   | `[CLS] A [SEP] B [SEP]`, masked, 0-padded          |
| input_mask            | int32   | [B, L]   | 1 on real tokens, 0 on padding                    |
| segment_ids           | int32   | [B, L]   | 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`, 0 on padding |
| masked_lm_positions   | int32   | [B, P]   | sorted positions to predict, 0-padded             |
| masked_lm_ids         | int32   | [B, P]   | original token ids at those positions, 0-padded   |
| masked_lm_weights     | float32 | [B, P]   | 1.0 for a real prediction, 0.0 for padding        |
| next_sentence_labels  | int32   | [B]      | 0 = IsNext, 1 = NotNext (B from another document) |

L = max_seq_length, P = max_predictions_per_seq. On disk (tf.Example) the
names are the same as the original BERT's, every feature int64 except
masked_lm_weights (float), and next_sentence_labels has shape [1].

Packed batches (`pack_examples`: pretraining_input.py, tfrecords.py) hold R rows, each of up
to K = max_sequences_per_row sentence pairs one after the other; the pairs attend and
are predicted each on its own:

| feature               | dtype   | shape    | meaning                                          |
|-----------------------|---------|----------|--------------------------------------------------|
| input_mask            | int32   | [R, L]   | k on the tokens of the row's k-th pair (1, 2, ...), 0 on padding |
| masked_lm_positions   | int32   | [R, P]   | positions in the row: the row's pairs' predictions, in order |
| next_sentence_labels  | int32   | [R, K]   | each pair's label, 0 in empty slots               |
| next_sentence_weights | float32 | [R, K]   | 1.0 for a pair, 0.0 for an empty slot             |
| cls_positions         | int32   | [R, K]   | each pair's [CLS] in the row, 0 in empty slots    |

and the other features as above, with R for B. P bounds the predictions of a whole row.

Masked LM alone (`next_sentence_prediction=False`): every sequence is `[CLS] text [SEP]`
with segment ids 0, and batches have no next_sentence_labels (nor on disk);
packed ones have no next_sentence_weights or cls_positions either, which only
next-sentence prediction reads (`features(packed, next_sentence=False)`). A packed
row's sequences are told apart by input_mask alone.

Train batches (not eval batches, and not in FEATURES: no model reads it) also
carry `stream_position`, int64 [B, S]: where the stream stands after each row.
Passing a row back as `position=` to the dataset function that made it
restarts the stream right after that row, so a resumed run keeps
`stream_position[-1]` of the last batch it trained on. S and the meaning of the
S integers belong to the source, which names them: pretraining_input.POSITION_FIELDS
for the online pipeline, tfrecords.POSITION_FIELDS (PACKED_POSITION_FIELDS) for
offline TFRecords. A checkpoint keeps the names with the positions
(streams.Positions), so a resume refuses positions that count something else.
"""

import numpy as np

FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


# What a packed batch holds besides FEATURES.
PACKED_FEATURES = ("next_sentence_weights", "cls_positions")
# What only next-sentence prediction reads.
NEXT_SENTENCE_FEATURES = ("next_sentence_labels", *PACKED_FEATURES)


def features(packed: bool, next_sentence: bool = True) -> tuple[str, ...]:
    names = (*FEATURES, *PACKED_FEATURES) if packed else FEATURES
    if next_sentence:
        return names
    return tuple(name for name in names if name not in NEXT_SENTENCE_FEATURES)


def feature_shapes(
    max_seq_length: int, max_predictions_per_seq: int, slots: int = 0
) -> dict[str, tuple]:
    """Per-row shapes (no batch axis); of packed rows of `slots` pairs when `slots` > 0."""
    shapes = {
        "input_ids": (max_seq_length,),
        "input_mask": (max_seq_length,),
        "segment_ids": (max_seq_length,),
        "masked_lm_positions": (max_predictions_per_seq,),
        "masked_lm_ids": (max_predictions_per_seq,),
        "masked_lm_weights": (max_predictions_per_seq,),
        "next_sentence_labels": (),
    }
    if slots:
        shapes.update({name: (slots,) for name in ("next_sentence_labels", *PACKED_FEATURES)})
    return shapes


def feature_dtype(name: str) -> np.dtype:
    weights = ("masked_lm_weights", "next_sentence_weights")
    return np.dtype(np.float32 if name in weights else np.int32)
