"""Sequence packing: the layout, the planned shapes, and a packed batch computing what the
unpacked one does (the same examples, logits and loss)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from bertjax import losses
from bertjax.model import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    position_ids,
)
from data_pipeline import config as config_lib
from data_pipeline import packing, schema
from data_pipeline import pretraining_input as pretraining_data
from data_pipeline.finetune import classification_input
from data_pipeline.finetune.classification_config import ClassificationConfig

CLS, SEP, PAD = 101, 102, 0
PAIRS = [
    ("The train to the coast left late.", "It arrived at noon."),
    ("A short one.", ""),
    ("Packing keeps each example's attention to itself.", "And its positions."),
    ("Yes.", "No."),
    ("The longest sentence here has quite a few more words than the others do.", ""),
    ("Tokens of one example never see another's.", ""),
]


def encoded(tokenizer, pairs, max_seq_length=32):
    return classification_input.encode_texts(
        tokenizer,
        tf.constant([a for a, _ in pairs]),
        tf.constant([b for _, b in pairs]),
        max_seq_length=max_seq_length,
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
    )


def test_first_fit_decreasing_places_the_longest_first():
    rows, slots = packing.first_fit_decreasing(np.array([3, 4, 2, 5, 8, 1]), 8)
    # 8 | 5 3 | 4 2 1
    assert rows.tolist() == [1, 2, 2, 1, 0, 2]
    assert slots.tolist() == [1, 0, 1, 0, 0, 2]
    shape = packing.pack_shape(np.array([3, 4, 2, 5, 8, 1]), [[0, 1, 2], [3, 4, 5]], 8, 1)
    assert shape == packing.PackShape(rows=2, slots=2)
    assert packing.pack_shape(np.array([3, 4]), [[0, 1]], 8, 4) == packing.PackShape(4, 2)


def test_a_packed_batch_holds_each_example_whole_where_it_says(tokenizer):
    tokens = encoded(tokenizer, PAIRS)
    lengths = tokens["input_mask"].numpy().sum(1)
    shape = packing.pack_shape(lengths, [np.arange(len(PAIRS))], 32, 1)
    assert shape.rows < len(PAIRS)
    labels = tf.constant(np.arange(len(PAIRS), dtype=np.int32) + 10)
    packed = packing.pack(tokens, {"label": labels}, shape, pad_id=PAD, first_row=3)
    packed = {k: v.numpy() for k, v in packed.items()}
    ids, mask, segments = (tokens[k].numpy() for k in ("input_ids", "input_mask", "segment_ids"))
    # The same placement as the plan's.
    rows, slots = packing.first_fit_decreasing(lengths, 32)
    np.testing.assert_array_equal(packed["example_slot"], (3 + rows) * shape.slots + slots)
    for n in range(len(PAIRS)):
        row, slot = rows[n], slots[n]
        tokens_of = packed["input_mask"][row] == slot + 1
        assert np.flatnonzero(tokens_of)[0] == packed["cls_positions"][row, slot]
        assert np.all(np.diff(np.flatnonzero(tokens_of)) == 1)  # one piece
        np.testing.assert_array_equal(packed["input_ids"][row, tokens_of], ids[n, mask[n] > 0])
        np.testing.assert_array_equal(
            packed["segment_ids"][row, tokens_of], segments[n, : lengths[n]]
        )
        assert packed["label"][row, slot] == 10 + n
    assert (packed["label"] > 0).sum() == len(PAIRS)  # the empty slots are 0
    assert (packed["input_ids"][packed["input_mask"] == 0] == PAD).all()
    assert packed["input_mask"].astype(bool).sum() == mask.sum()  # no token lost or doubled


def test_per_token_columns_move_with_their_tokens(tokenizer):
    tokens = encoded(tokenizer, PAIRS)
    mask = tokens["input_mask"].numpy()
    lengths = mask.sum(1)
    shape = packing.pack_shape(lengths, [np.arange(len(PAIRS))], 32, 1)
    # Each token's own number (example * 100 + position), -1 on padding.
    numbered = np.where(mask > 0, np.arange(len(PAIRS))[:, None] * 100 + np.arange(32), -1)
    packed = packing.pack(
        tokens,
        {},
        shape,
        pad_id=PAD,
        per_token={"number": tf.constant(numbered, tf.int32), "zero_padded": tokens["input_mask"]},
        token_padding={"number": -1},
    )
    number, ids = packed["number"].numpy(), packed["input_mask"].numpy()
    rows, slots = packing.first_fit_decreasing(lengths, 32)
    for n in range(len(PAIRS)):
        np.testing.assert_array_equal(
            number[rows[n], ids[rows[n]] == slots[n] + 1], numbered[n, : lengths[n]]
        )
    assert (number[ids == 0] == -1).all()
    np.testing.assert_array_equal(packed["zero_padded"].numpy(), ids > 0)


def test_a_batch_larger_than_its_plan_fails_loudly(tokenizer):
    tokens = encoded(tokenizer, PAIRS)
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than the 1 packed rows"):
        packing.pack(tokens, {}, packing.PackShape(rows=1, slots=8), pad_id=PAD)


def test_positions_restart_at_each_packed_example():
    mask = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    assert position_ids(mask).tolist() == [[0, 1, 2, 0, 1, 0, 6, 7], list(range(8))]


@pytest.mark.slow
def test_the_plan_holds_every_batch_of_every_host(tokenizer, tmp_path):
    train = tmp_path / "train.tsv"
    rng = np.random.default_rng(0)
    words = ["the", "a", "packing", "row", "example", "short", "long", "word", "text", "model"]
    lines = ["text\tlabel"] + [
        " ".join(rng.choice(words, rng.integers(1, 20))) + f"\t{i % 3}" for i in range(50)
    ]
    train.write_text("\n".join(lines) + "\n")
    config = ClassificationConfig(train_file=str(train), eval_file=str(train), text_a="text")
    task = classification_input.load_classification_task(config)
    for split, epochs in (("train", 3.0), ("eval", 1.0)):
        shape = classification_input.packed_shape(
            task, tokenizer, split=split, batch_size=4, process_count=2, num_epochs=epochs
        )
        for host in range(2):
            share = dict(split=split, batch_size=4, process_index=host, process_count=2)
            share["num_epochs"] = epochs
            plain, _ = classification_input.make_classification_dataset(task, tokenizer, **share)
            packed, _ = classification_input.make_classification_dataset(
                task, tokenizer, **share, packed=shape
            )
            for a, b in zip(plain.as_numpy_iterator(), packed.as_numpy_iterator(), strict=True):
                assert b["input_ids"].shape == (shape.rows, 128)
                # The same examples: their labels and weights, taken out of their slots.
                first = host * shape.rows * shape.slots
                where = b["example_slot"] - first
                np.testing.assert_array_equal(b["label"].reshape(-1)[where], a["label"])
                np.testing.assert_array_equal(
                    b["example_weight"].reshape(-1)[where], a["example_weight"]
                )
                assert b["input_mask"].astype(bool).sum() == a["input_mask"].sum()
                if split == "train":
                    np.testing.assert_array_equal(b["stream_position"], a["stream_position"])


TINY = BertConfig(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def packed_and_plain(tokenizer):
    tokens = encoded(tokenizer, PAIRS)
    lengths = tokens["input_mask"].numpy().sum(1)
    shape = packing.pack_shape(lengths, [np.arange(len(PAIRS))], 32, 1)
    labels = tf.constant(np.arange(len(PAIRS), dtype=np.int32) % 3)
    per_example = {"label": labels, "example_weight": tf.ones([len(PAIRS)], tf.float32)}
    packed = packing.pack(tokens, per_example, shape, pad_id=PAD)
    plain = {**tokens, **per_example}
    as_np = lambda batch: {k: np.asarray(v) for k, v in batch.items()}  # noqa: E731
    return as_np(plain), as_np(packed)


@pytest.mark.slow
def test_packed_rows_give_each_example_its_unpacked_logits_and_loss(tokenizer):
    plain, packed = packed_and_plain(tokenizer)
    model = BertForSequenceClassification(TINY, num_labels=3)
    inputs = [plain[k] for k in ("input_ids", "input_mask", "segment_ids")]
    params = model.init(jax.random.key(0), *inputs, deterministic=True)["params"]
    expected = model.apply({"params": params}, *inputs, deterministic=True)
    got = model.apply(
        {"params": params},
        *(packed[k] for k in ("input_ids", "input_mask", "segment_ids", "cls_positions")),
        deterministic=True,
    )
    assert got.shape == (*packed["label"].shape, 3)
    np.testing.assert_allclose(got.reshape(-1, 3)[packed["example_slot"]], expected, atol=2e-5)
    plain_sums = losses.classification_sums(expected, plain)
    packed_sums = losses.classification_sums(got, packed)
    for key in plain_sums:
        np.testing.assert_allclose(packed_sums[key], plain_sums[key], rtol=1e-5)


@pytest.mark.slow
def test_no_token_attends_across_packed_examples(tokenizer):
    _, packed = packed_and_plain(tokenizer)
    model = BertForSequenceClassification(TINY, num_labels=3)
    names = ("input_ids", "input_mask", "segment_ids", "cls_positions")
    params = model.init(jax.random.key(0), *(packed[k] for k in names), deterministic=True)
    before = model.apply(params, *(packed[k] for k in names), deterministic=True)
    # Change every token of the second example of the first row with two.
    row = int(np.flatnonzero(packed["input_mask"].max(axis=1) >= 2)[0])
    changed = dict(packed)
    changed["input_ids"] = packed["input_ids"].copy()
    changed["input_ids"][row, packed["input_mask"][row] == 2] = 1000
    after = model.apply(params, *(changed[k] for k in names), deterministic=True)
    np.testing.assert_array_equal(after[row, 0], before[row, 0])
    assert not np.allclose(after[row, 1], before[row, 1])


# ------------------------------------------------------------------------ pretraining


def test_first_fit_decreasing_within_keeps_each_rows_limits():
    lengths, costs = np.array([10, 3, 8, 2, 6, 5]), np.array([2, 1, 2, 1, 2, 1])
    # Rows of 16 tokens, 2 sequences and a budget of 3: the 6 (cost 2) fits the first row's
    # tokens but not its budget, so it opens a third row.
    rows, slots, offsets = packing.first_fit_decreasing_within(
        lengths, costs, max_seq_length=16, max_slots=2, budget=3
    )
    assert rows.tolist() == [0, 1, 1, 2, 2, 0]
    assert slots.tolist() == [0, 1, 0, 1, 0, 1]
    assert offsets.tolist() == [0, 8, 0, 6, 0, 10]
    with pytest.raises(ValueError, match="sequence 1 .* does not fit"):
        packing.first_fit_decreasing_within(
            np.array([2, 17]), np.array([1, 1]), max_seq_length=16, max_slots=2, budget=3
        )


@pytest.fixture(scope="module")
def packed_pretraining_batch(bert_tokenizer_json, tmp_path_factory):
    """A batch of 4 packed rows of 64 tokens from a corpus of short sentences, and the same
    sentence pairs one a row, each with its masks: the unpacked batch, laid out here."""
    corpus = tmp_path_factory.mktemp("corpus") / "documents.txt"
    words = ["river", "bridge", "stone", "town", "market", "garden"]
    corpus.write_text(
        "\n\n".join(
            "\n".join(
                f"The {words[(d + s) % 6]} of {d} stood for {s} years." for s in range(2 + d % 4)
            )
            for d in range(16)
        ),
        encoding="utf-8",
    )
    data = config_lib.default_config()
    data.update(
        source="text",
        text_files=str(corpus),
        eval_fraction=0.0,
        vocab_file=bert_tokenizer_json,
        max_seq_length=64,
        max_predictions_per_seq=10,
        short_seq_prob=0.5,
        document_buffer_size=8,
        pack_examples=True,
    )
    dataset = pretraining_data.make_pretraining_dataset(data, split="train", batch_size=4, seed=0)
    packed = next(dataset.as_numpy_iterator())
    plain = {name: [] for name in schema.FEATURES}
    for r, k in zip(*np.nonzero(packed["next_sentence_weights"]), strict=True):
        own = packed["input_mask"][r] == k + 1
        start, length = packed["cls_positions"][r, k], own.sum()
        for name in ("input_ids", "segment_ids", "input_mask"):
            plain[name].append(
                np.where(np.arange(64) < length, np.roll(packed[name][r], -start), 0)
            )
        plain["input_mask"][-1] = (plain["input_mask"][-1] > 0).astype(np.int32)
        mine = packed["masked_lm_weights"][r] * own[packed["masked_lm_positions"][r]] > 0
        for name, shift in (("masked_lm_positions", start), ("masked_lm_ids", 0)):
            values = packed[name][r][mine] - shift
            plain[name].append(np.pad(values, (0, 10 - len(values))))
        plain["masked_lm_weights"].append((np.arange(10) < mine.sum()).astype(np.float32))
        plain["next_sentence_labels"].append(packed["next_sentence_labels"][r, k])
    plain = {name: np.stack(values) for name, values in plain.items()}
    assert len(plain["input_ids"]) > 6  # several pairs a row
    return packed, plain


PACKED_INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "cls_positions")


@pytest.mark.slow
def test_packed_pretraining_rows_give_each_pair_its_unpacked_logits_and_losses(
    packed_pretraining_batch,
):
    packed, plain = packed_pretraining_batch
    model = BertForPreTraining(TINY)
    inputs = [plain[k] for k in PACKED_INPUTS[:-1]]
    params = model.init(jax.random.key(0), *inputs, deterministic=True)["params"]
    mlm, nsp = model.apply({"params": params}, *inputs, deterministic=True)
    packed_mlm, packed_nsp = model.apply(
        {"params": params}, *(packed[k] for k in PACKED_INPUTS), deterministic=True
    )
    assert packed_nsp.shape == (4, 3, 2)
    # A row's predictions are its pairs' in order, as are the pairs of the unpacked batch.
    np.testing.assert_allclose(
        packed_mlm[packed["masked_lm_weights"] > 0], mlm[plain["masked_lm_weights"] > 0], atol=2e-5
    )
    np.testing.assert_allclose(packed_nsp[packed["next_sentence_weights"] > 0], nsp, atol=2e-5)
    plain_sums = losses.pretraining_sums(mlm, nsp, plain)
    packed_sums = losses.pretraining_sums(packed_mlm, packed_nsp, packed)
    for key in plain_sums:
        np.testing.assert_allclose(packed_sums[key], plain_sums[key], rtol=1e-5)
    assert float(packed_sums["nsp_count"]) == len(plain["input_ids"])
    assert float(packed_sums["mlm_weight"]) == plain["masked_lm_weights"].sum()


@pytest.mark.slow
def test_no_token_attends_across_packed_pretraining_pairs(packed_pretraining_batch):
    packed, _ = packed_pretraining_batch
    model = BertForPreTraining(TINY)
    inputs = [packed[k] for k in PACKED_INPUTS]
    params = model.init(jax.random.key(0), *inputs, deterministic=True)
    mlm, nsp = model.apply(params, *inputs, deterministic=True)
    row = int(np.flatnonzero(packed["input_mask"].max(axis=1) >= 2)[0])
    changed = dict(packed)
    changed["input_ids"] = packed["input_ids"].copy()
    changed["input_ids"][row, packed["input_mask"][row] == 2] = 1000  # the second pair
    after_mlm, after_nsp = model.apply(
        params, *(changed[k] for k in PACKED_INPUTS), deterministic=True
    )
    np.testing.assert_array_equal(after_nsp[row, 0], nsp[row, 0])
    assert not np.allclose(after_nsp[row, 1], nsp[row, 1])
    weights = packed["masked_lm_weights"][row] > 0
    first = weights & (packed["input_mask"][row][packed["masked_lm_positions"][row]] == 1)
    np.testing.assert_array_equal(after_mlm[row][first], mlm[row][first])
